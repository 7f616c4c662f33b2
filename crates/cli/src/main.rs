//! The `theseus` command line.

fn main() {}

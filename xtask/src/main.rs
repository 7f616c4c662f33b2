//! Developer tasks: `cargo xtask <task>`.

fn main() {}

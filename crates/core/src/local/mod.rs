//! The local backend: runs jobs on this machine, detached from the CLI.

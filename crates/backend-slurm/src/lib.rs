//! SSH transport, plain-SSH backend and Slurm backend for theseus. Not implemented yet; see issue 4.
//! The CLI reports plain and slurm hosts as unsupported until this crate provides a `Backend`.

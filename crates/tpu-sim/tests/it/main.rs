//! Integration tests of the TPU API simulator, driven over HTTPS by a plain HTTP client (curl,
//! trusting the simulator's CA file) and, for workers, by OpenSSH through the simulator's proxy.

mod api;
mod auth;
mod breaks;
mod support;
mod workers;

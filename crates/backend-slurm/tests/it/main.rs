//! Integration tests of the SSH transport and the plain backend against a real sshd on
//! 127.0.0.1 (see [`support`]).

mod plain;
mod support;
mod transport;

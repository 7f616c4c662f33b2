//! Integration tests of the SSH transport and the plain backend against a real sshd on
//! 127.0.0.1 (see [`support`]): commands and streams ([`transport`]), login shells, the user's
//! ssh config, the plain backend's lifecycle, shipping through the store and `reclaim`.

mod login_shell;
mod plain;
mod plain_lifecycle;
mod probe;
mod reclaim;
mod store;
mod support;
mod transport;
mod user_config;

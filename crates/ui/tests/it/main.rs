//! The server over real HTTP on 127.0.0.1 (port 0) against a [`Source`](theseus_ui::Source)
//! held in memory: the token on every route, the routes' answers and errors, the event streams
//! and shutdown.

mod auth;
mod harness;
mod routes;
mod streams;

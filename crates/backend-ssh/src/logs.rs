//! A remote log read over SSH as theseus log lines, shared by the plain and Slurm backends:
//! each line parsed by the backend's own rule, transport errors named by the backend, and only
//! one rank's lines kept when `--rank` asks for it.

use futures::StreamExt as _;
use theseus_core::Error;
use theseus_core::backend::{LogLine, LogStream};

use crate::ssh::RemoteLines;

/// `lines` as a [`LogStream`]; `backend` names the backend in errors.
pub(crate) fn log_stream(
    lines: RemoteLines,
    backend: String,
    rank: Option<u32>,
    parse: fn(&str) -> LogLine,
) -> LogStream {
    lines
        .map(move |line| match line {
            Ok(text) => Ok(parse(&text)),
            Err(e) => {
                Err(Error::Backend { backend: backend.clone(), message: e.to_string(), source: Some(Box::new(e)) })
            }
        })
        .filter(move |line| {
            let keep = !matches!((rank, line), (Some(want), Ok(LogLine { rank: Some(r), .. })) if *r != want);
            futures::future::ready(keep)
        })
        .boxed()
}

//! Which hosts a command that covers every host (`du`, `gc`) works on, and what it says of a
//! host whose backend cannot do the work yet.

use anyhow::{Result, bail};
use theseus_core::config::{DispatchConfig, HostKind};

/// The hosts a command covers: `only`, or every host of the config in its order.
pub(crate) fn hosts(config: &DispatchConfig, only: Option<&str>) -> Result<Vec<String>> {
    match only {
        Some(name) if config.hosts.contains_key(name) => Ok(vec![name.to_owned()]),
        Some(name) => {
            let known: Vec<&str> = config.hosts.keys().map(String::as_str).collect();
            bail!("--host {name}: no host of that name in the config (hosts: {})", known.join(", "))
        }
        None => Ok(config.hosts.keys().cloned().collect()),
    }
}

/// What a backend without `reclaim`/`usage` says (rather than being skipped in silence).
pub(crate) fn not_yet(kind: HostKind, what: &str) -> String {
    format!("not yet for {kind} hosts: the code store and run code dirs of its cluster are not {what} by this version")
}

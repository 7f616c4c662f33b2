//! Settings every command shares: the user's home, the loaded config, the ledger, and the
//! backend of each host.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow};
use theseus_core::backend::DynBackend;
use theseus_core::config::{self, ConfigSources, HostTypes, LoadedConfig};
use theseus_core::ledger::{self, Ledger};

use crate::args::{GlobalArgs, OutputFormat};
use crate::backends;

/// Resolved global settings.
#[derive(Clone)]
pub(crate) struct Context {
    pub(crate) home: PathBuf,
    pub(crate) output: OutputFormat,
    pub(crate) quiet: bool,
    state_dir: PathBuf,
    sources: ConfigSources,
}

impl Context {
    pub(crate) fn new(global: &GlobalArgs, host_types: HostTypes) -> Result<Context> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .ok_or_else(|| anyhow!("HOME is not set; theseus needs it for ~/.theseus.yaml and its state dir"))?;
        let state_dir = match &global.state_dir {
            Some(d) => d.clone(),
            None => ledger::default_state_dir(&home, std::env::var("XDG_STATE_HOME").ok().as_deref()),
        };
        let mut cli = Vec::new();
        for set in &global.set {
            let (k, v) = set
                .split_once('=')
                .ok_or_else(|| anyhow!("--set {set:?}: expected KEY=VALUE, e.g. --set hosts.local.processes=2"))?;
            cli.push((k.to_owned(), v.to_owned()));
        }
        let sources = ConfigSources {
            explicit_file: global.dispatch_config.clone(),
            home: Some(home.clone()),
            project_start: std::env::current_dir().ok(),
            env: std::env::vars().collect(),
            cli,
            host_types,
        };
        Ok(Context { home, output: global.output, quiet: global.quiet, state_dir, sources })
    }

    /// The host types this program knows (see [`crate::backends`]).
    pub(crate) fn host_types(&self) -> &HostTypes {
        &self.sources.host_types
    }

    /// Loads and validates the layered config.
    pub(crate) fn config(&self) -> Result<LoadedConfig> {
        let loaded = config::load::load(&self.sources)?;
        for warning in loaded.warnings.iter().cloned().chain(backends::check(&loaded)?) {
            self.info(format!("theseus: warning: {warning}"));
        }
        Ok(loaded)
    }

    /// Where [`theseus_core::snapshot::Snapshot::digests`] remembers the hashes of unchanged
    /// files between submits.
    pub(crate) fn hash_cache_dir(&self) -> PathBuf {
        self.state_dir.join("hash-cache")
    }

    /// Opens the job ledger.
    pub(crate) fn ledger(&self) -> Result<Ledger> {
        Ledger::open(&self.state_dir)
            .with_context(|| format!("cannot open the job ledger in `{}`", self.state_dir.display()))
    }

    /// Opens the job ledger for a command that reads it (`list`, `status`, `logs`, `forward`,
    /// `shell`): when it cannot be written (a read-only filesystem or dir), it is read as it
    /// is, with one warning that the states shown cannot be stored.
    pub(crate) fn ledger_for_reading(&self) -> Result<Ledger> {
        let error = match self.ledger() {
            Ok(ledger) => return Ok(ledger),
            Err(e) => e,
        };
        match Ledger::open_read_only(&self.state_dir) {
            Ok(ledger) => {
                let cause = error.chain().last().map(ToString::to_string).unwrap_or_default();
                eprintln!(
                    "theseus: warning: the job ledger `{}` is read-only ({cause}): showing it as last recorded; \
                     what this command learns is not stored (make the state dir writable, or set \
                     --state-dir/XDG_STATE_HOME to a writable one)",
                    ledger.path().display()
                );
                Ok(ledger)
            }
            Err(_) => Err(error),
        }
    }

    /// Opens the job ledger as it is, read-only (what [`Context::ledger_for_reading`] falls back
    /// to, without its warning).
    pub(crate) fn read_only_ledger(&self) -> Result<Ledger> {
        Ledger::open_read_only(&self.state_dir)
            .with_context(|| format!("cannot open the job ledger in `{}`", self.state_dir.display()))
    }

    /// The backend of a configured host.
    pub(crate) fn backend(&self, loaded: &LoadedConfig, host: &str) -> Result<Arc<DynBackend>> {
        backends::for_host(&loaded.config, host, &self.home)
    }

    /// Prints a progress or info line on stderr unless `--quiet`.
    pub(crate) fn info(&self, line: impl AsRef<str>) {
        if !self.quiet {
            eprintln!("{}", line.as_ref());
        }
    }
}

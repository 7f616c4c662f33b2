//! The host's VM over the Cloud TPU API, as the backend's [`Vm`].
//!
//! Until part tpuapi's `Cloud` lands, every call says so (the backend's worker half is tested
//! with a fake VM, see `tests/it/support.rs`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use theseus_core::{Error, Result};

use super::vm::{Progress, Ready, Vm, VmNode};
use crate::config::TpuSettings;

/// The VM of host `name`.
pub(crate) fn vm(name: &str, _settings: &TpuSettings, _home: &Path) -> Arc<dyn Vm> {
    Arc::new(NoApi { name: name.to_owned() })
}

/// A VM without an API client.
#[derive(Debug)]
struct NoApi {
    name: String,
}

impl NoApi {
    fn error(&self) -> Error {
        Error::backend(format!("tpu({})", self.name), "the Cloud TPU API client is not built into this theseus yet")
    }
}

#[async_trait]
impl Vm for NoApi {
    async fn node(&self) -> Result<Option<VmNode>> {
        Err(self.error())
    }

    async fn plan_creation(&self) -> Result<Option<String>> {
        Err(self.error())
    }

    async fn ensure_ready(&self, _: bool, _: &BTreeMap<String, String>, _: Progress<'_>) -> Result<Ready> {
        Err(self.error())
    }

    async fn delete(&self, _: Progress<'_>) -> Result<()> {
        Err(self.error())
    }
}

//! The host's VM over the Cloud TPU API ([`crate::cloud::Cloud`]), as the backend's [`Vm`]:
//! worker addresses internal or external per `internal_ip`, the login user the node's
//! `ssh-keys` names first, the node's resource name for worker 0's self-delete, and the local
//! user's public key into `ssh-keys` of a VM theseus creates (as gcloud puts its own).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use theseus_core::{Error, Result};

use super::vm::{Progress, Ready, Vm, VmNode};
use crate::auth::Env;
use crate::cloud::{Cloud, Node, Waits, ssh_key_line};
use crate::config::TpuSettings;

/// The VM of host `name`; when its API client cannot be made (a bad endpoint or CA file), every
/// call says why.
pub(crate) fn vm(name: &str, settings: &TpuSettings, home: &Path) -> Arc<dyn Vm> {
    let env = Env::from_process();
    match Cloud::with_env(name, settings, env.clone()) {
        Ok(cloud) => over_cloud(cloud, settings, home, env, None),
        Err(e) => Arc::new(Broken { name: name.to_owned(), why: e.to_string() }),
    }
}

/// The VM of `cloud` (made by the caller, e.g. over a simulator, from `env` and with `waits`),
/// whose host has `settings`; `home` holds the local user's `.ssh` keys.
pub fn over_cloud(cloud: Cloud, settings: &TpuSettings, home: &Path, env: Env, waits: Option<Waits>) -> Arc<dyn Vm> {
    Arc::new(CloudVm { cloud, settings: settings.clone(), home: home.to_owned(), env, waits })
}

/// The API-backed VM.
#[derive(Debug)]
struct CloudVm {
    cloud: Cloud,
    settings: TpuSettings,
    home: PathBuf,
    /// What `cloud` was made from, to make one with the settings a run was submitted with.
    env: Env,
    waits: Option<Waits>,
}

impl CloudVm {
    async fn view(&self, node: Node) -> Result<VmNode> {
        let project = self.cloud.client().await?.project().to_owned();
        let ssh_user = node
            .metadata
            .get(crate::cloud::node::SSH_KEYS)
            .and_then(|keys| keys.lines().find_map(|l| l.split_once(':').map(|(u, _)| u.trim().to_owned())))
            .filter(|u| !u.is_empty());
        Ok(VmNode {
            resource: format!("projects/{project}/locations/{}/nodes/{}", self.settings.zone, node.name),
            // The API's `createTime` tells incarnations apart (a recreated node has a new one).
            id: node.create_time.clone().unwrap_or_default(),
            state: node.state.clone(),
            health: node.health_description.clone().or(node.health.clone()),
            workers: node.workers.iter().map(|w| w.address(self.settings.internal_ip).to_owned()).collect(),
            ssh_user,
            created_by_theseus: node.created_by_theseus,
            labels: node.labels,
            name: node.name,
        })
    }

    /// The local user and the login line of their key for a VM theseus creates.
    fn ssh_keys(&self) -> Vec<String> {
        let user = self
            .settings
            .ssh_user
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .or_else(|| std::env::var("LOGNAME").ok())
            .unwrap_or_default();
        if user.is_empty() {
            return Vec::new();
        }
        ssh_key_line(&user, &self.home).into_iter().collect()
    }
}

#[async_trait]
impl Vm for CloudVm {
    async fn node(&self) -> Result<Option<VmNode>> {
        match self.cloud.node().await? {
            Some(n) => Ok(Some(self.view(n).await?)),
            None => Ok(None),
        }
    }

    async fn plan_creation(&self) -> Result<Option<String>> {
        Ok(self.cloud.plan_creation().await?)
    }

    async fn ensure_ready(
        &self,
        create_confirmed: bool,
        labels: &BTreeMap<String, String>,
        progress: Progress<'_>,
    ) -> Result<Ready> {
        let ensured = self.cloud.ensure_ready(create_confirmed, labels, &self.ssh_keys(), progress).await?;
        Ok(Ready { node: self.view(ensured.node).await?, created: ensured.created })
    }

    async fn delete(&self, progress: Progress<'_>) -> Result<()> {
        self.cloud.delete(progress).await?;
        Ok(())
    }

    fn creation(&self) -> Option<serde_json::Value> {
        serde_json::to_value(&self.settings).ok()
    }

    /// With the settings of the submit (`--tpu-version`, `--tpu-spot` and the config then), not
    /// the config now: a preempted spot VM is created anew as the same spot VM.
    async fn ensure_ready_as(
        &self,
        creation: Option<&serde_json::Value>,
        create_confirmed: bool,
        labels: &BTreeMap<String, String>,
        progress: Progress<'_>,
    ) -> Result<Ready> {
        let then: Option<TpuSettings> = creation.and_then(|v| serde_json::from_value(v.clone()).ok());
        let Some(then) = then.filter(|t| *t != self.settings) else {
            return self.ensure_ready(create_confirmed, labels, progress).await;
        };
        let mut cloud = Cloud::with_env(self.cloud.name(), &then, self.env.clone())?;
        if let Some(waits) = self.waits {
            cloud = cloud.with_waits(waits);
        }
        let vm = CloudVm { cloud, settings: then, home: self.home.clone(), env: self.env.clone(), waits: self.waits };
        vm.ensure_ready(create_confirmed, labels, progress).await
    }
}

/// A VM whose API client could not be made.
#[derive(Debug)]
struct Broken {
    name: String,
    why: String,
}

impl Broken {
    fn error(&self) -> Error {
        Error::backend(format!("tpu({})", self.name), self.why.clone())
    }
}

#[async_trait]
impl Vm for Broken {
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

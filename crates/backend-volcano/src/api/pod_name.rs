//! [`PodName`]: a pod as `cancel` watches it go away, decoded with the few metadata fields that
//! watch reads, so the specs, statuses, labels and managed fields of a thousand pods are skipped
//! while parsing and never held (a whole pod decoded per watch event made `cancel` of a
//! 1,024-pod gang peak past 50 MiB).

use std::borrow::Cow;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::Deserialize;

use super::{Cluster, WATCH_PAGE};
use crate::error::VolcanoError;

/// A pod's name, namespace, uid, resourceVersion and deletionTimestamp: the rest of the object
/// is skipped while it is parsed.
#[derive(Clone, Debug, Deserialize)]
pub struct PodName {
    /// Only the fields named above are set.
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
}

fn slim_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

impl kube::Resource for PodName {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Events of a watch of [`PodName`]s, errors mapped.
pub type PodNameEvents =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<watcher::Event<PodName>, VolcanoError>> + Send>>;

impl Cluster {
    /// The pods matching `label_selector`, page by page, each decoded as a [`PodName`].
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_pod_names(&self, label_selector: &str) -> Result<Vec<PodName>, VolcanoError> {
        let mut all = Vec::new();
        self.list_paged_as::<k8s_openapi::api::core::v1::Pod, PodName>(
            &self.pods(),
            &super::labels(label_selector),
            |page| match page {
                super::Page::Restart => all.clear(),
                super::Page::Items(items) => all.extend(items),
            },
        )
        .await?;
        Ok(all)
    }

    /// [`Cluster::watch_pods`] with each pod decoded as a [`PodName`].
    pub fn watch_pod_names(&self, label_selector: &str) -> PodNameEvents {
        let config = watcher::Config::default().labels(label_selector).page_size(WATCH_PAGE);
        let this = self.clone();
        let target = self.target::<PodName>("watch", None);
        let api: Api<PodName> = Api::namespaced(self.client.clone(), &self.namespace);
        watcher(api, config).default_backoff().map_err(move |e| this.map_watch_error(e, &target)).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_pod_decodes_to_its_name_and_deletion_only() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "j-worker-0", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "deletionTimestamp": "2026-11-27T10:00:00Z", "labels": {"a": "b"},
                         "managedFields": [{"manager": "x"}]},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": "Running"}
        });
        let got: PodName = serde_json::from_value(pod).unwrap();
        assert_eq!(got.metadata.name.as_deref(), Some("j-worker-0"));
        assert_eq!(got.metadata.resource_version.as_deref(), Some("7"));
        assert!(got.metadata.deletion_timestamp.is_some());
        assert!(got.metadata.labels.is_none() && got.metadata.managed_fields.is_none());
        assert_eq!(<PodName as kube::Resource>::url_path(&(), Some("ns")), "/api/v1/namespaces/ns/pods");
    }
}

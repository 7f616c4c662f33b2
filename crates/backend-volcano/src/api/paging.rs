//! Paged LISTs of [`Cluster`] (`limit` and `continue`), and the pod type a status decodes its
//! pages into, so that listing thousands of objects holds one page at a time.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;

use super::{Cluster, labels};
use crate::error::VolcanoError;

/// Items per page of a LIST (the `limit`; `kubectl get` and client-go's pager use 500). Measured
/// on the simulator (debug build, `status` of 1,024 pods): peak RSS 44 MiB with 250, 48 MiB with
/// 500, in about the same time.
pub const LIST_PAGE: u32 = 250;
/// One step of a paged LIST (see [`Cluster::list_paged`]).
pub(crate) enum Page<K> {
    /// The next page's items.
    Items(Vec<K>),
    /// Everything handed over so far is void: the list starts over.
    Restart,
}

/// The part of a pod a status reads, as it is decoded from a LIST (see
/// [`Cluster::visit_pod_statuses`]).
#[derive(Clone, Debug, serde::Deserialize)]
struct PodFacts {
    metadata: NameOnly,
    spec: Option<NodeOnly>,
    status: Option<k8s_openapi::api::core::v1::PodStatus>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct NameOnly {
    name: Option<String>,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeOnly {
    node_name: Option<String>,
}

/// The part of a pod a log read needs (see [`Cluster::visit_pods_for_logs`]): its name, labels
/// (the task) and status (whether its container started).
#[derive(Clone, Debug, serde::Deserialize)]
struct LogFacts {
    metadata: NameAndLabels,
    status: Option<k8s_openapi::api::core::v1::PodStatus>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct NameAndLabels {
    name: Option<String>,
    labels: Option<std::collections::BTreeMap<String, String>>,
}

impl LogFacts {
    fn into_pod(self) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: self.metadata.name,
                labels: self.metadata.labels,
                ..Default::default()
            },
            spec: None,
            status: self.status,
        }
    }
}

impl PodFacts {
    fn into_pod(self) -> Pod {
        crate::status::slim(Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: self.metadata.name,
                ..Default::default()
            },
            spec: self
                .spec
                .map(|s| k8s_openapi::api::core::v1::PodSpec { node_name: s.node_name, ..Default::default() }),
            status: self.status,
        })
    }
}

impl Cluster {
    /// Pods of the namespace matching `label_selector`, page by page (see
    /// [`Cluster::list_paged`]), each decoded with only what [`crate::status::slim`] keeps (its
    /// name, node and status): the spec, labels, annotations and managed fields of thousands of
    /// pods are skipped while parsing, never held.
    ///
    /// # Errors
    /// The mapped errors.
    pub(crate) async fn visit_pod_statuses(
        &self,
        label_selector: &str,
        visit: impl FnMut(Page<Pod>),
    ) -> Result<(), VolcanoError> {
        self.visit_pods_as(label_selector, PodFacts::into_pod, visit).await
    }

    /// Pods of the namespace matching `label_selector`, page by page, each decoded with its
    /// name, labels and status only (what a log read needs): the spec, annotations and managed
    /// fields of thousands of pods are skipped while parsing, never held.
    ///
    /// # Errors
    /// The mapped errors.
    pub(crate) async fn visit_pods_for_logs(
        &self,
        label_selector: &str,
        visit: impl FnMut(Page<Pod>),
    ) -> Result<(), VolcanoError> {
        self.visit_pods_as(label_selector, LogFacts::into_pod, visit).await
    }

    /// The pods matching `label_selector`, page by page, each decoded as `T` (the fields a
    /// caller reads) and handed over as the pod `into` makes of it.
    async fn visit_pods_as<T: Clone + DeserializeOwned + Debug>(
        &self,
        label_selector: &str,
        into: fn(T) -> Pod,
        mut visit: impl FnMut(Page<Pod>),
    ) -> Result<(), VolcanoError> {
        self.list_paged_as::<Pod, T>(&self.pods(), &labels(label_selector), |page| match page {
            Page::Restart => visit(Page::Restart),
            Page::Items(items) => visit(Page::Items(items.into_iter().map(into).collect())),
        })
        .await
    }

    /// Lists in the namespace, or cluster-wide when `api` is not namespaced.
    pub(super) async fn list<K>(&self, api: &Api<K>, params: &ListParams) -> Result<Vec<K>, VolcanoError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let mut all = Vec::new();
        self.list_paged(api, params, |page| match page {
            Page::Restart => all.clear(),
            Page::Items(items) => all.extend(items),
        })
        .await?;
        Ok(all)
    }

    /// Lists in pages of [`LIST_PAGE`] (`limit` and `continue`, as `kubectl get` does), handing
    /// each page to `visit` as it arrives, so a caller that keeps only what it needs holds one
    /// page at a time. When the continue token expired (`410 Gone`: the API server compacted
    /// the list's resourceVersion before the next page was asked for), the list starts over
    /// unpaged (`visit` gets [`Page::Restart`] first), as client-go's pager does
    /// (`FullListIfExpired`).
    ///
    /// # Errors
    /// The mapped errors of a page.
    pub(crate) async fn list_paged<K>(
        &self,
        api: &Api<K>,
        params: &ListParams,
        visit: impl FnMut(Page<K>),
    ) -> Result<(), VolcanoError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        self.list_paged_as::<K, K>(api, params, visit).await
    }

    /// [`Cluster::list_paged`], each item decoded as `T`: a type with only the fields the caller
    /// reads skips the rest of each object while it is parsed.
    pub(super) async fn list_paged_as<K, T>(
        &self,
        api: &Api<K>,
        params: &ListParams,
        mut visit: impl FnMut(Page<T>),
    ) -> Result<(), VolcanoError>
    where
        K: Resource<DynamicType = ()>,
        T: Clone + DeserializeOwned + Debug,
    {
        let mut target = self.target::<K>("list", None);
        let url = api.resource_url().to_owned();
        if !url.contains("/namespaces/") {
            target.namespace = None;
        }
        let mut token: Option<String> = None;
        let mut paged = true;
        loop {
            let mut page = if paged { params.clone().limit(LIST_PAGE) } else { params.clone() };
            page.continue_token = token.take();
            let continuing = page.continue_token.is_some();
            let list = self
                .call(target.clone(), || async {
                    let request =
                        kube::core::Request::new(url.as_str()).list(&page).map_err(kube::Error::BuildRequest)?;
                    match self.client.request::<kube::core::ObjectList<T>>(request).await {
                        Err(kube::Error::Api(status)) if status.code == 410 && continuing => Ok(None),
                        other => other.map(Some),
                    }
                })
                .await?;
            let Some(list) = list else {
                visit(Page::Restart);
                paged = false;
                continue;
            };
            token = list.metadata.continue_.filter(|t| !t.is_empty());
            visit(Page::Items(list.items));
            if token.is_none() {
                return Ok(());
            }
        }
    }
}

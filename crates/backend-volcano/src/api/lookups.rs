//! Reads of the cluster objects a job names but theseus does not create: its namespace, its
//! ServiceAccount and its PriorityClass (checked before a submit ships anything), and the
//! PriorityClasses, PodGroups and queues `plan` weighs, and the pods a status reads to tell who
//! took an evicted job's place. Each is `None` when the object does not
//! exist; a refusal (403) is the caller's to say.

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::ListParams;

use super::{Cluster, Target};
use crate::error::VolcanoError;
use crate::types::{PodGroup, Queue};

impl Cluster {
    /// The namespace `name` (cluster-scoped: reading it needs a ClusterRole).
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn get_namespace(&self, name: &str) -> Result<Option<Namespace>, VolcanoError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let target = Target { namespace: None, ..self.target::<Namespace>("get", Some(name)) };
        self.call(target, || api.get_opt(name)).await
    }

    /// The ServiceAccount `name` of the namespace.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn get_service_account(&self, name: &str) -> Result<Option<ServiceAccount>, VolcanoError> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &self.namespace);
        self.call(self.target::<ServiceAccount>("get", Some(name)), || api.get_opt(name)).await
    }

    /// The PriorityClass `name` (cluster-scoped).
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn get_priority_class(&self, name: &str) -> Result<Option<PriorityClass>, VolcanoError> {
        let api: Api<PriorityClass> = Api::all(self.client.clone());
        let target = Target { namespace: None, ..self.target::<PriorityClass>("get", Some(name)) };
        self.call(target, || api.get_opt(name)).await
    }

    /// Every PriorityClass.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_priority_classes(&self) -> Result<Vec<PriorityClass>, VolcanoError> {
        let api: Api<PriorityClass> = Api::all(self.client.clone());
        self.list(&api, &ListParams::default()).await
    }

    /// Pods of the namespace matching `field_selector`.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_pods_where(&self, field_selector: &str) -> Result<Vec<Pod>, VolcanoError> {
        self.list(&self.pods(), &super::fields(field_selector)).await
    }

    /// Every Volcano queue.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_queues(&self) -> Result<Vec<Queue>, VolcanoError> {
        let api: Api<Queue> = Api::all(self.client.clone());
        self.list(&api, &ListParams::default()).await
    }

    /// The PodGroups of every namespace (`all`) or of this one.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_podgroups(&self, all: bool) -> Result<Vec<PodGroup>, VolcanoError> {
        let api: Api<PodGroup> =
            if all { Api::all(self.client.clone()) } else { Api::namespaced(self.client.clone(), &self.namespace) };
        self.list(&api, &ListParams::default()).await
    }
}

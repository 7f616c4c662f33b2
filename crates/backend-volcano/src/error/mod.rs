//! The Volcano backend's IO error: every failure of a cluster call, named by verb, resource and
//! namespace, with the fix where there is one; a failed ship is [`ShipError`] (raised by
//! [`crate::ship`]). Pure rendering errors stay in [`crate::render`].

mod ship;

use std::time::Duration;

pub use ship::{RemoteStep, ShipError};

/// A [`VolcanoError::Config`].
pub(crate) fn config_error(source_name: &str, context: Option<String>, problem: &str, fix: &str) -> VolcanoError {
    VolcanoError::Config {
        source_name: source_name.to_owned(),
        context,
        problem: problem.to_owned(),
        fix: fix.to_owned(),
    }
}

/// What [`VolcanoError::Connect`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectFailure {
    /// The verb.
    pub verb: String,
    /// The resource.
    pub resource: String,
    /// The apiserver URL.
    pub server: String,
    /// The proxy used, described (`http://p:3128 (from HTTPS_PROXY)`).
    pub via: Option<String>,
    /// What failed.
    pub problem: String,
    /// What to do about it.
    pub fix: String,
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let via = self.via.as_deref().map(|p| format!(" (through the proxy {p})")).unwrap_or_default();
        write!(
            f,
            "cannot {} {}: API server {}{via}: {}; {}",
            self.verb, self.resource, self.server, self.problem, self.fix
        )
    }
}

/// A failed cluster operation.
#[derive(Debug, thiserror::Error)]
pub enum VolcanoError {
    /// The kubeconfig (or in-cluster config) cannot be used.
    #[error("kubeconfig {source_name}{}: {problem}; {fix}", context_suffix(context))]
    Config {
        /// The file(s) read, or `in-cluster service account`.
        source_name: String,
        /// The context asked for, if any.
        context: Option<String>,
        /// What is wrong.
        problem: String,
        /// What to do about it.
        fix: String,
    },

    /// 401: the apiserver did not accept the credentials.
    #[error(
        "the API server {server} rejected the credentials of {} (401 Unauthorized: {message}); they are expired or invalid: log in again or refresh the kubeconfig",
        context.as_deref().map_or_else(|| "the in-cluster service account".to_owned(), |c| format!("context {c:?}"))
    )]
    Unauthorized {
        /// The kubeconfig context in use (`None` in-cluster).
        context: Option<String>,
        /// The apiserver URL.
        server: String,
        /// The apiserver's message.
        message: String,
    },

    /// 403: RBAC refused the call.
    #[error(
        "RBAC refused: cannot {verb} {resource}{} (403 Forbidden: {message}); ask your cluster admin for a {} granting {verb} on {resource}{}{}",
        scope(namespace),
        if namespace.is_some() { "Role" } else { "ClusterRole" },
        scope(namespace),
        if namespace.is_some() { ", or use a namespace you may use: the host's `namespace` key, else the kubeconfig context's namespace" } else { "" }
    )]
    Forbidden {
        /// `create`, `get`, `list`, `watch`, `delete`, `patch`.
        verb: String,
        /// `jobs.batch.volcano.sh`, `pods`, `pods/log`, ...
        resource: String,
        /// `None` for cluster-scoped resources.
        namespace: Option<String>,
        /// The apiserver's message.
        message: String,
    },

    /// 409 on create: an object of that name exists and is not ours.
    #[error("{kind} {name:?} already exists{}", scope(namespace))]
    AlreadyExists {
        /// Resource, e.g. `jobs.batch.volcano.sh`.
        kind: String,
        /// Object name.
        name: String,
        /// `None` for cluster-scoped resources.
        namespace: Option<String>,
    },

    /// 409 on update or delete: the object changed since it was read (its `resourceVersion` or
    /// `uid` precondition failed).
    #[error("cannot {verb} {resource} {name:?}{}: it was changed by someone else meanwhile", scope(namespace))]
    Conflict {
        /// `update`, `patch`, `delete`.
        verb: String,
        /// Resource, e.g. `leases.coordination.k8s.io`.
        resource: String,
        /// Object name.
        name: String,
        /// `None` for cluster-scoped resources.
        namespace: Option<String>,
    },

    /// Another run of the same project, group and name is live (or being submitted).
    #[error(
        "job `{name}` already has a live run in namespace {namespace:?}: {what}; pass --replace to delete it and submit, or pick another name"
    )]
    AlreadyRunning {
        /// The job's name.
        name: String,
        /// The namespace.
        namespace: String,
        /// The live run, e.g. `vcjob x (run r)` or `run r, being submitted (claim lease c)`.
        what: String,
    },

    /// A concurrent `--replace` took the job's name while this submit was under way; what this
    /// submit created was deleted again.
    #[error(
        "job `{name}` in namespace {namespace:?}: this submit lost its name claim while it was under way ({by}); nothing of this run was left running"
    )]
    Replaced {
        /// The job's name.
        name: String,
        /// The namespace.
        namespace: String,
        /// What happened, e.g. `taken over by run R, a concurrent --replace`.
        by: String,
    },

    /// 404 where the object must exist.
    #[error("{resource} {name:?} not found{}", scope(namespace))]
    NotFound {
        /// Resource, e.g. `pods`.
        resource: String,
        /// Object name.
        name: String,
        /// `None` for cluster-scoped resources.
        namespace: Option<String>,
    },

    /// The host's Volcano queue does not exist.
    #[error(
        "volcano queue {queue:?} does not exist on cluster {cluster:?} (queues are cluster-wide; jobs go to namespace {namespace:?}); fix `queue` in the host config (`kubectl get queues` lists them)"
    )]
    QueueNotFound {
        /// Queue name.
        queue: String,
        /// Theseus cluster name of the host.
        cluster: String,
        /// The host's namespace.
        namespace: String,
    },

    /// An object the job names (its namespace, ServiceAccount or PriorityClass) does not exist:
    /// the cluster would refuse the job or its pods, so nothing is shipped.
    #[error("{what} does not exist on cluster {cluster:?}: {fix}")]
    MissingObject {
        /// The object, e.g. `serviceaccount "trainer" in namespace "ml"`.
        what: String,
        /// Theseus cluster name of the host.
        cluster: String,
        /// The config key to fix and how to list what exists.
        fix: String,
    },

    /// The host's Volcano queue exists but is not `Open`: Volcano's admission webhook refuses
    /// every job sent to it.
    #[error(
        "volcano queue {queue:?} on cluster {cluster:?} is {state}: Volcano admits no job to a queue that is not Open; ask its admin to open it (`vcctl queue operate --name {queue} --action open`) or set another `queue` in the host config (`kubectl get queues` lists them)"
    )]
    QueueNotOpen {
        /// Queue name.
        queue: String,
        /// Its `status.state` (`Closed`, `Closing`, ...).
        state: String,
        /// Theseus cluster name of the host.
        cluster: String,
    },

    /// Any other answer of the apiserver that is an error.
    #[error("{verb} {resource}{} failed: {code} {message}", scope(namespace))]
    Api {
        /// The verb.
        verb: String,
        /// The resource.
        resource: String,
        /// `None` for cluster-scoped resources.
        namespace: Option<String>,
        /// HTTP status (0 when the apiserver gave none).
        code: u16,
        /// The apiserver's message.
        message: String,
    },

    /// The apiserver could not be reached (or stopped answering), even after retries.
    #[error(
        "cannot {verb} {resource}: API server {server} unreachable after {attempts} attempt{} ({detail}); check that the cluster is up and that the kubeconfig's server address (and any proxy) is right",
        if *attempts == 1 { "" } else { "s" }
    )]
    Transport {
        /// The verb.
        verb: String,
        /// The resource.
        resource: String,
        /// The apiserver URL.
        server: String,
        /// Attempts made.
        attempts: u32,
        /// `connection refused`, `connection reset`, `no response within 60s`, ...
        detail: String,
        /// The last client error, if there was one.
        #[source]
        source: Option<Box<kube::Error>>,
    },

    /// The connection to the apiserver failed in a way another attempt cannot mend: a TLS
    /// verdict (unknown authority, name mismatch, expiry), a name that does not resolve, a proxy
    /// that will not tunnel.
    #[error("{0}")]
    Connect(Box<ConnectFailure>),

    /// The kubeconfig user's exec credential plugin failed (worded without its arguments or
    /// `env` values).
    #[error("kubeconfig {source_name}{}: {message}", context_suffix(context))]
    Credential {
        /// The file(s) read.
        source_name: String,
        /// The context used.
        context: Option<String>,
        /// What failed and the fix.
        message: String,
    },

    /// The apiserver accepted the call (or the connection) but did not answer in time.
    #[error(
        "the API server {server} did not answer ({verb} {resource}) within {}s; check that it is up and reachable, or raise the host's `api_timeout`",
        after.as_secs_f64()
    )]
    NoAnswer {
        /// The verb.
        verb: String,
        /// The resource.
        resource: String,
        /// The apiserver URL.
        server: String,
        /// How long the call waited (the host's `api_timeout`, or one attempt's timeout).
        after: Duration,
    },

    /// A wait ran out of time.
    #[error("timed out after {}s waiting for {what}", after.as_secs_f64())]
    Timeout {
        /// What was awaited, e.g. `job "x" to be deleted`.
        what: String,
        /// How long it waited.
        after: Duration,
    },

    /// A client-side failure that is none of the above (TLS, auth plugin, decoding).
    #[error("cannot {verb} {resource}{}", scope(namespace))]
    Client {
        /// The verb.
        verb: String,
        /// The resource.
        resource: String,
        /// `None` for cluster-scoped resources.
        namespace: Option<String>,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },

    /// A pod theseus needs (the helper) cannot start or ended early.
    #[error("pod {pod}: {message}")]
    Pod {
        /// The pod.
        pod: String,
        /// What is wrong, quoting the cluster's reason.
        message: String,
    },

    /// Shipping the code into the helper pod failed.
    #[error(transparent)]
    Ship(#[from] ShipError),

    /// Shipping through the code store on the PVC failed (already worded by the store).
    #[error(transparent)]
    Store(theseus_core::Error),

    /// The user interrupted (Ctrl-C, SIGTERM); what was created has been cleaned up.
    #[error("interrupted; the helper was deleted and no job was created")]
    Interrupted,

    /// A quantity in a cluster object cannot be parsed.
    #[error("{what} is not a Kubernetes quantity")]
    Quantity {
        /// Where the value was, e.g. `queue "q" spec.capability[nvidia.com/gpu]`.
        what: String,
        /// The parse error.
        #[source]
        source: crate::quantity::InvalidQuantity,
    },
}

impl VolcanoError {
    /// Whether trying again later may succeed: 429 and 5xx gateway answers, and transport
    /// failures. RBAC, not-found, conflicts and config problems are not transient.
    pub fn is_transient(&self) -> bool {
        match self {
            VolcanoError::Api { code, .. } => is_transient_code(*code),
            VolcanoError::Transport { .. } | VolcanoError::NoAnswer { .. } => true,
            _ => false,
        }
    }

    /// The HTTP status behind this error, when it came from the apiserver.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            VolcanoError::Unauthorized { .. } => Some(401),
            VolcanoError::Forbidden { .. } => Some(403),
            VolcanoError::NotFound { .. } | VolcanoError::QueueNotFound { .. } | VolcanoError::MissingObject { .. } => {
                Some(404)
            }
            VolcanoError::AlreadyExists { .. } | VolcanoError::Conflict { .. } => Some(409),
            VolcanoError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// HTTP statuses worth retrying: throttling and gateway/availability failures.
pub(crate) fn is_transient_code(code: u16) -> bool {
    matches!(code, 429 | 500 | 502 | 503 | 504)
}

fn scope(namespace: &Option<String>) -> String {
    match namespace {
        Some(ns) => format!(" in namespace {ns:?}"),
        None => " (cluster-scoped)".to_owned(),
    }
}

fn context_suffix(context: &Option<String>) -> String {
    context.as_deref().map(|c| format!(" (context {c:?})")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_names_verb_resource_namespace_and_the_fix() {
        let e = VolcanoError::Forbidden {
            verb: "create".into(),
            resource: "jobs.batch.volcano.sh".into(),
            namespace: Some("ml".into()),
            message: "user \"bob\" cannot create".into(),
        };
        assert_eq!(
            e.to_string(),
            "RBAC refused: cannot create jobs.batch.volcano.sh in namespace \"ml\" (403 Forbidden: user \"bob\" \
             cannot create); ask your cluster admin for a Role granting create on jobs.batch.volcano.sh in \
             namespace \"ml\", or use a namespace you may use: the host's `namespace` key, else the kubeconfig \
             context's namespace"
        );
        let cluster_wide = VolcanoError::Forbidden {
            verb: "get".into(),
            resource: "queues.scheduling.volcano.sh".into(),
            namespace: None,
            message: "no".into(),
        };
        assert!(cluster_wide.to_string().contains("a ClusterRole granting get"), "{cluster_wide}");
    }

    #[test]
    fn unauthorized_names_the_context() {
        let e = VolcanoError::Unauthorized {
            context: Some("prod".into()),
            server: "https://k8s:6443".into(),
            message: "Unauthorized".into(),
        };
        let text = e.to_string();
        assert!(text.contains("context \"prod\"") && text.contains("expired or invalid"), "{text}");
    }

    #[test]
    fn transience_follows_the_status() {
        let api = |code| VolcanoError::Api {
            verb: "get".into(),
            resource: "pods".into(),
            namespace: None,
            code,
            message: String::new(),
        };
        assert!(api(429).is_transient());
        assert!(api(503).is_transient());
        assert!(!api(400).is_transient());
        assert!(!api(422).is_transient());
        let gone = VolcanoError::Timeout { what: "x".into(), after: Duration::from_secs(1) };
        assert!(!gone.is_transient());
    }
}

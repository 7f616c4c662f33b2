//! Gathering availability from every candidate host at once, each probe bounded by its host's
//! own budget: a host answers within it or is "unknown", with the reason.
//!
//! It sits above the [`crate::backend::Backend`] trait it calls, so that the data it returns
//! ([`crate::availability`]) stays below both the trait and the solver.
//!
//! The budget of a host ([`budget`]) is the `--probe-timeout` flag when given, else the host's
//! `probe_timeout` key, else [`DEFAULT_TIMEOUT`] (the usual precedence: an explicit flag beats
//! the config, which beats the built-in default). Backends do not retry inside a probe (a
//! refused connection is an answer), so the budget is only ever spent on a host that is silent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::availability::Availability;
use crate::backend::DynBackend;
use crate::config::HostConfig;
use crate::solver::Request;

/// A host's probe budget when neither the flag nor its `probe_timeout` key sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The shortest budget: below it a probe of a healthy host over SSH could not answer.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(100);

/// One host to probe: its name, its backend and its budget.
pub type Target = (String, Arc<DynBackend>, Duration);

/// The budget of `host`: `flag` (`--probe-timeout`) when given, else the host's
/// `probe_timeout`, else [`DEFAULT_TIMEOUT`]; never below [`MIN_TIMEOUT`].
pub fn budget(flag: Option<Duration>, host: &HostConfig) -> Duration {
    flag.or_else(|| host.probe_timeout()).unwrap_or(DEFAULT_TIMEOUT).max(MIN_TIMEOUT)
}

/// Asks every backend for its availability at the same time. A host that fails or does not
/// answer within its own budget is reported as [`Availability::Unknown`] with the reason (the
/// error and its causes, or `no answer within <budget>`); this never waits longer than the
/// largest budget (plus scheduling noise) in total.
pub async fn gather(targets: &[Target], request: &Request) -> BTreeMap<String, Availability> {
    let probes = targets.iter().map(|(name, backend, timeout)| {
        let backend = Arc::clone(backend);
        let request = request.clone();
        let timeout = *timeout;
        async move {
            let res = tokio::time::timeout(timeout, backend.availability(&request)).await;
            let availability = match res {
                Ok(Ok(a)) => a,
                Ok(Err(e)) => Availability::Unknown { reason: format!("probe failed: {}", chain(&e)) },
                Err(_) => Availability::Unknown {
                    reason: format!("no answer within {}s (probe timeout)", timeout.as_secs_f64()),
                },
            };
            (name.clone(), availability)
        }
    });
    futures::future::join_all(probes).await.into_iter().collect()
}

/// The hosts of `availability` that did not answer, with their reasons, in name order.
pub fn unanswered(availability: &BTreeMap<String, Availability>) -> Vec<(String, String)> {
    availability
        .iter()
        .filter_map(|(name, a)| match a {
            Availability::Unknown { reason } => Some((name.clone(), reason.clone())),
            _ => None,
        })
        .collect()
}

/// An error and its causes on one line, each cause once (a message that already ends with its
/// cause's text is not repeated).
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use async_trait::async_trait;

    use super::*;
    use crate::backend::{Backend, JobHandle, JobStatus, LogOptions, LogStream, PreparedJob, RunLayout, SubmitOptions};
    use crate::config::HostKind;
    use crate::job::JobIdentity;
    use crate::solver::{ChipRequest, Plan};

    /// Answers after `delay` with `free` chips, or fails when `free` is `None`.
    #[derive(Debug)]
    struct Probe {
        delay: Duration,
        free: Option<u32>,
    }

    impl fmt::Display for Probe {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "probe")
        }
    }

    #[async_trait]
    impl Backend for Probe {
        fn kind(&self) -> HostKind {
            HostKind::named("box")
        }
        fn layout(&self, _: &JobIdentity, _: &Plan) -> crate::Result<RunLayout> {
            Err(crate::backend::not_supported("layout", self))
        }
        async fn availability(&self, _: &Request) -> crate::Result<Availability> {
            tokio::time::sleep(self.delay).await;
            match self.free {
                Some(chips) => Ok(Availability::Free { chips, source: "test".into() }),
                None => Err(crate::Error::backend(self, "ssh: connection refused")),
            }
        }
        async fn submit(&self, _: &PreparedJob, _: &SubmitOptions) -> crate::Result<JobHandle> {
            Err(crate::backend::not_supported("submit", self))
        }
        async fn status(&self, _: &JobHandle) -> crate::Result<JobStatus> {
            Err(crate::backend::not_supported("status", self))
        }
        async fn logs(&self, _: &JobHandle, _: &LogOptions) -> crate::Result<LogStream> {
            Err(crate::backend::not_supported("logs", self))
        }
        async fn cancel(&self, _: &JobHandle) -> crate::Result<JobStatus> {
            Err(crate::backend::not_supported("cancel", self))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn slow_and_failing_hosts_become_unknown_without_blocking_the_others() {
        let budget = Duration::from_secs(5);
        let backends: Vec<Target> = vec![
            ("fast".into(), Arc::new(Probe { delay: Duration::from_millis(10), free: Some(4) }), budget),
            ("hung".into(), Arc::new(Probe { delay: Duration::from_secs(3600), free: Some(8) }), budget),
            ("broken".into(), Arc::new(Probe { delay: Duration::from_millis(1), free: None }), budget),
        ];
        let started = tokio::time::Instant::now();
        let got = gather(&backends, &request()).await;
        // All probes ran at once: the total is the timeout, not the sum of the delays.
        assert!(started.elapsed() < Duration::from_secs(6), "{:?}", started.elapsed());
        assert_eq!(got["fast"], Availability::Free { chips: 4, source: "test".into() });
        assert_eq!(got["hung"], Availability::Unknown { reason: "no answer within 5s (probe timeout)".into() });
        match &got["broken"] {
            Availability::Unknown { reason } => assert!(reason.contains("connection refused"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    fn request() -> Request {
        Request {
            chip: ChipRequest::AnyGpu,
            count: 1,
            preferred_clusters: vec![],
            forbidden_clusters: vec![],
            host: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_host_is_given_its_own_budget() {
        let hung = || -> Arc<DynBackend> { Arc::new(Probe { delay: Duration::from_secs(3600), free: Some(8) }) };
        let backends: Vec<Target> = vec![
            ("short".into(), hung(), Duration::from_millis(1500)),
            ("long".into(), hung(), Duration::from_secs(3)),
        ];
        let got = gather(&backends, &request()).await;
        assert_eq!(got["short"], Availability::Unknown { reason: "no answer within 1.5s (probe timeout)".into() });
        assert_eq!(got["long"], Availability::Unknown { reason: "no answer within 3s (probe timeout)".into() });
        assert_eq!(
            unanswered(&got),
            [
                ("long".to_owned(), "no answer within 3s (probe timeout)".to_owned()),
                ("short".to_owned(), "no answer within 1.5s (probe timeout)".to_owned())
            ]
        );
    }

    /// A host with only a `probe_timeout`.
    #[derive(Debug, Clone)]
    struct Probed(Option<Duration>, std::collections::BTreeMap<String, String>);

    impl crate::config::HostSettings for Probed {
        fn kind(&self) -> HostKind {
            HostKind::named("probed")
        }
        fn cluster(&self) -> &str {
            "c"
        }
        fn env(&self) -> &std::collections::BTreeMap<String, String> {
            &self.1
        }
        fn env_mut(&mut self) -> &mut std::collections::BTreeMap<String, String> {
            &mut self.1
        }
        fn uv_groups(&self) -> &[String] {
            &[]
        }
        fn probe_timeout(&self) -> Option<Duration> {
            self.0
        }
        fn to_value(&self) -> serde_json::Value {
            serde_json::json!({})
        }
        fn clone_box(&self) -> Box<dyn crate::config::HostSettings> {
            Box::new(self.clone())
        }
        fn validate(&mut self, _path: &str) -> std::result::Result<(), crate::keys::KeyError> {
            Ok(())
        }
        fn gpus(&self) -> crate::config::Gpus<'_> {
            crate::config::Gpus::Unlisted
        }
        fn fit(
            &self,
            _gres_mapping: &std::collections::BTreeMap<String, String>,
            _want: &crate::fit::Want,
            _availability: &Availability,
        ) -> crate::fit::Outcome {
            crate::fit::Outcome::pass("never fits")
        }
        fn backend(
            &self,
            _name: &str,
            _cluster: &crate::cluster::ClusterConfig,
            _home: &std::path::Path,
        ) -> Arc<crate::backend::DynBackend> {
            unreachable!("not built in this test")
        }
    }

    #[test]
    fn the_flag_beats_the_host_key_which_beats_the_default() {
        let host = |key: Option<&str>| {
            let timeout = key.map(|k| crate::duration::parse(k).unwrap());
            HostConfig::new(Box::new(Probed(timeout, Default::default())))
        };
        let flag = Some(Duration::from_secs(9));
        assert_eq!(budget(flag, &host(Some("2s"))), Duration::from_secs(9));
        assert_eq!(budget(None, &host(Some("2s"))), Duration::from_secs(2));
        assert_eq!(budget(None, &host(None)), DEFAULT_TIMEOUT);
        assert_eq!(DEFAULT_TIMEOUT, Duration::from_secs(5));
        assert_eq!(budget(Some(Duration::ZERO), &host(None)), MIN_TIMEOUT);
    }
}

//! Gathering availability from every candidate host at once, each probe bounded by a timeout.
//!
//! It sits above the [`crate::backend::Backend`] trait it calls, so that the data it returns
//! ([`crate::availability`]) stays below both the trait and the solver.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::availability::Availability;
use crate::backend::DynBackend;
use crate::solver::Request;

/// Asks every backend for its availability at the same time. A host that fails or does not
/// answer within `timeout` is reported as [`Availability::Unknown`]; this never waits longer
/// than `timeout` (plus scheduling noise) in total.
pub async fn gather(
    backends: &[(String, Arc<DynBackend>)],
    request: &Request,
    timeout: Duration,
) -> BTreeMap<String, Availability> {
    let probes = backends.iter().map(|(name, backend)| {
        let backend = Arc::clone(backend);
        let request = request.clone();
        async move {
            let res = tokio::time::timeout(timeout, backend.availability(&request)).await;
            let availability = match res {
                Ok(Ok(a)) => a,
                Ok(Err(e)) => Availability::Unknown { reason: format!("probe failed: {e}") },
                Err(_) => Availability::Unknown {
                    reason: format!("no answer within {}s", timeout.as_secs_f64()),
                },
            };
            (name.clone(), availability)
        }
    });
    futures::future::join_all(probes).await.into_iter().collect()
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
            HostKind::Plain
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
        let backends: Vec<(String, Arc<DynBackend>)> = vec![
            ("fast".into(), Arc::new(Probe { delay: Duration::from_millis(10), free: Some(4) })),
            ("hung".into(), Arc::new(Probe { delay: Duration::from_secs(3600), free: Some(8) })),
            ("broken".into(), Arc::new(Probe { delay: Duration::from_millis(1), free: None })),
        ];
        let request = Request {
            chip: ChipRequest::AnyGpu,
            count: 1,
            preferred_clusters: vec![],
            forbidden_clusters: vec![],
            host: None,
        };
        let started = tokio::time::Instant::now();
        let got = gather(&backends, &request, Duration::from_secs(5)).await;
        // All probes ran at once: the total is the timeout, not the sum of the delays.
        assert!(started.elapsed() < Duration::from_secs(6), "{:?}", started.elapsed());
        assert_eq!(got["fast"], Availability::Free { chips: 4, source: "test".into() });
        assert_eq!(got["hung"], Availability::Unknown { reason: "no answer within 5s".into() });
        match &got["broken"] {
            Availability::Unknown { reason } => assert!(reason.contains("connection refused"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
}

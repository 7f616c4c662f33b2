//! Retries with backoff: which errors are transient, how long to wait between attempts
//! (exponential, jittered, capped, honouring a server's `Retry-After`), and the loop every API
//! call goes through.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use crate::error::{VolcanoError, is_transient_code};

/// Time allowed for one non-streaming call (list, get, create, ...), per attempt.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Time allowed for one call, every retry included, unless the host sets `api_timeout`.
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(30);

/// How calls are retried: exponential backoff with jitter, capped, for transient errors only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay before the first retry (doubles after each).
    pub base: Duration,
    /// Longest delay between attempts (also caps a server's `retryAfterSeconds`).
    pub cap: Duration,
    /// Attempts in total, the first included (at least 1).
    pub max_attempts: u32,
    /// Time allowed for one attempt of a non-streaming call.
    pub request_timeout: Duration,
    /// Time allowed for a whole call, every attempt and wait included (the host's
    /// `api_timeout`): an API server that accepts connections and never answers costs this much.
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(200),
            cap: Duration::from_secs(5),
            max_attempts: 5,
            request_timeout: REQUEST_TIMEOUT,
            deadline: DEFAULT_API_TIMEOUT,
        }
    }
}

impl RetryPolicy {
    /// Millisecond delays, for tests.
    pub fn fast() -> RetryPolicy {
        RetryPolicy { base: Duration::from_millis(1), cap: Duration::from_millis(20), ..RetryPolicy::default() }
    }

    /// The policy of an availability probe: one attempt, so that a refused connection or a
    /// failed name lookup is answered at once (the caller's probe budget bounds the rest).
    /// Submit, ship and every other call keep the full policy.
    #[must_use]
    pub fn for_probe(&self) -> RetryPolicy {
        RetryPolicy { max_attempts: 1, ..self.clone() }
    }

    /// The wait before attempt `attempt + 1` after attempt `attempt` (1-based) failed: the
    /// server's hint when it gave one, else `base * 2^(attempt-1)` with the upper half jittered;
    /// never more than `cap`.
    pub fn delay(&self, attempt: u32, server_hint: Option<Duration>) -> Duration {
        if let Some(hint) = server_hint {
            return hint.min(self.cap);
        }
        let exp = self.base.saturating_mul(1u32 << attempt.saturating_sub(1).min(20)).min(self.cap);
        let half = exp / 2;
        let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        let extra = if jitter_ms == 0 { 0 } else { random_u64() % (jitter_ms + 1) };
        (half + Duration::from_millis(extra)).min(self.cap)
    }
}

/// Errors that know whether another attempt may help.
pub trait Transient {
    /// Whether to retry.
    fn is_transient(&self) -> bool;
    /// How long the server asked us to wait.
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}

impl Transient for VolcanoError {
    fn is_transient(&self) -> bool {
        VolcanoError::is_transient(self)
    }
}

impl Transient for kube::Error {
    fn is_transient(&self) -> bool {
        match self {
            kube::Error::Api(status) => is_transient_code(status.code),
            // A failed credential plugin is not run again and again.
            other if crate::diagnose::find_cause::<crate::credential::CredentialFailed>(other).is_some() => false,
            // A TLS verdict or a name that does not resolve is the same on every attempt.
            other => match crate::diagnose::diagnose(&crate::diagnose::chain_text(other), "", Some("")) {
                Some(d) => d.transient,
                None => transport_detail(other).is_some(),
            },
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            kube::Error::Api(status) if status.code == 429 => status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|&s| s > 0)
                .map(|s| Duration::from_secs(u64::from(s))),
            _ => None,
        }
    }
}

/// Runs `op` until it succeeds, fails with a non-transient error, or `policy.max_attempts`
/// attempts were made. `what` names the operation in logs.
///
/// # Errors
/// The last error of `op`.
pub async fn retry<T, E, F, Fut>(policy: &RetryPolicy, what: &str, op: F) -> Result<T, E>
where
    E: Transient + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    retry_counted(policy, what, op).await.0
}

/// [`retry`], also returning the number of attempts made.
pub async fn retry_counted<T, E, F, Fut>(policy: &RetryPolicy, what: &str, mut op: F) -> (Result<T, E>, u32)
where
    E: Transient + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let max = policy.max_attempts.max(1);
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if attempt < max && e.is_transient() => {
                let delay = policy.delay(attempt, e.retry_after());
                tracing::debug!(operation = what, attempt, delay_ms = delay.as_millis() as u64, error = %e, "retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            res => return (res, attempt),
        }
    }
}

/// A short description of a transport failure (`connection refused`, ...), or `None` when `err`
/// is not one (an apiserver answer, a TLS or auth problem).
pub fn transport_detail(err: &kube::Error) -> Option<String> {
    if !matches!(err, kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)) {
        return None;
    }
    let mut text = String::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            let kind = match io.kind() {
                ConnectionRefused => Some("connection refused"),
                ConnectionReset => Some("connection reset"),
                ConnectionAborted => Some("connection aborted"),
                BrokenPipe => Some("broken pipe"),
                TimedOut => Some("timed out"),
                UnexpectedEof => Some("connection closed"),
                NotConnected => Some("not connected"),
                _ => None,
            };
            if let Some(kind) = kind {
                return Some(kind.to_owned());
            }
        }
        text.push_str(&e.to_string().to_lowercase());
        text.push('\n');
        cause = e.source();
    }
    if text.contains("certificate") || text.contains("tls") {
        return None;
    }
    [
        ("refused", "connection refused"),
        ("reset", "connection reset"),
        ("incomplete", "connection closed mid-response"),
        ("closed", "connection closed"),
        ("timed out", "timed out"),
        ("timeout", "timed out"),
        ("dns", "name resolution failed"),
        ("connect", "cannot connect"),
    ]
    .iter()
    .find(|(needle, _)| text.contains(needle))
    .map(|(_, detail)| (*detail).to_owned())
}

fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_are_jittered_capped_and_honor_the_server() {
        let policy = RetryPolicy::default();
        for _ in 0..50 {
            let d1 = policy.delay(1, None);
            assert!(d1 >= Duration::from_millis(100) && d1 <= Duration::from_millis(200), "{d1:?}");
            let d3 = policy.delay(3, None);
            assert!(d3 >= Duration::from_millis(400) && d3 <= Duration::from_millis(800), "{d3:?}");
            assert!(policy.delay(30, None) <= Duration::from_secs(5));
        }
        assert_eq!(policy.delay(1, Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(policy.delay(1, Some(Duration::from_secs(60))), Duration::from_secs(5));
    }

    #[derive(Debug)]
    struct Flaky(bool);
    impl std::fmt::Display for Flaky {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "flaky({})", self.0)
        }
    }
    impl Transient for Flaky {
        fn is_transient(&self) -> bool {
            self.0
        }
    }

    #[tokio::test]
    async fn retries_only_transient_errors_up_to_the_limit() {
        let policy = RetryPolicy::fast();
        let mut calls = 0;
        let (res, attempts) = retry_counted(&policy, "t", || {
            calls += 1;
            let n = calls;
            async move { if n < 3 { Err(Flaky(true)) } else { Ok(n) } }
        })
        .await;
        assert_eq!((res.unwrap(), attempts), (3, 3));

        let (res, attempts) = retry_counted(&policy, "t", || async { Err::<(), _>(Flaky(false)) }).await;
        assert!(res.is_err());
        assert_eq!(attempts, 1);

        let (res, attempts) = retry_counted(&policy, "t", || async { Err::<(), _>(Flaky(true)) }).await;
        assert!(res.is_err());
        assert_eq!(attempts, 5);
    }
}

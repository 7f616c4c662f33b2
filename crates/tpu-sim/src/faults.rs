//! The request log (`GET /sim/v1/requests`: method, path with query, status of every API and
//! token request, in order) and injected faults (`POST /sim/v1/faults`): fail the next request
//! matching a method and a path fragment with a status or by closing the connection without an
//! answer (`reset`), after letting `skip` of them pass; or make the next operation that
//! completes end with a given `google.rpc.Status` instead. With a flaky seed, about one read
//! (GET) in twenty answers 503 UNAVAILABLE, as Google's front ends now and then do; the seed
//! makes a run repeatable.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// One served request.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Logged {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub path: String,
    /// HTTP status of the answer.
    pub status: u16,
}

/// A fault asked for through the admin API.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct FaultSpec {
    /// Only requests of this method (any when absent).
    #[serde(default)]
    pub(crate) method: Option<String>,
    /// Only requests whose path and query contain this (any when absent).
    #[serde(default)]
    pub(crate) path: Option<String>,
    /// Answer with this HTTP status and Google's error body...
    #[serde(default)]
    pub(crate) status: Option<u16>,
    /// ...or close the connection without an answer (a front end dropping it)...
    #[serde(default)]
    pub(crate) reset: bool,
    /// Let this many matching requests pass before the fault applies (default 0).
    #[serde(default)]
    pub(crate) skip: u32,
    /// ...or end the next matching operation (by verb: `create`, `delete`; any when absent)
    /// with this `google.rpc.Status` (`{"code": 13, "message": "..."}`).
    #[serde(default)]
    pub(crate) operation: Option<OperationFault>,
    /// The message of the error (a default names the injection).
    #[serde(default)]
    pub(crate) message: Option<String>,
    /// How many matching requests fail (default 1).
    #[serde(default)]
    pub(crate) times: Option<u32>,
}

/// What an injected request fault does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Injected {
    /// Answer with this status and message.
    Status(u16, String),
    /// Close the connection without an answer.
    Reset,
}

/// An operation's injected end.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperationFault {
    pub(crate) code: i32,
    #[serde(default)]
    pub(crate) message: Option<String>,
    #[serde(default)]
    pub(crate) verb: Option<String>,
}

#[derive(Default)]
struct State {
    flaky: Option<rand::rngs::StdRng>,
    log: Vec<Logged>,
    requests: Vec<(FaultSpec, u32)>,
    operations: Vec<OperationFault>,
}

/// The log and the pending faults.
#[derive(Default)]
pub(crate) struct Faults {
    state: Mutex<State>,
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads fail now and then from here on, drawn from `seed`.
    pub(crate) fn set_flaky(&self, seed: u64) {
        use rand::SeedableRng as _;
        self.lock().flaky = Some(rand::rngs::StdRng::seed_from_u64(seed));
    }

    /// Whether this request is one of the flaky failures.
    pub(crate) fn flaky_hit(&self, method: &str) -> bool {
        use rand::Rng as _;
        method == "GET" && self.lock().flaky.as_mut().is_some_and(|rng| rng.random_range(0..20) == 0)
    }

    /// Queues a fault; an error names what is wrong with it.
    pub(crate) fn add(&self, spec: FaultSpec) -> Result<(), String> {
        match (&spec.status, &spec.operation) {
            (None, None) if spec.reset => {
                let times = spec.times.unwrap_or(1);
                self.lock().requests.push((spec, times));
                Ok(())
            }
            (Some(status), None) if (400..600).contains(status) && !spec.reset => {
                let times = spec.times.unwrap_or(1);
                self.lock().requests.push((spec, times));
                Ok(())
            }
            (None, Some(op)) if op.code > 0 && op.code <= 16 => {
                self.lock().operations.push(op.clone());
                Ok(())
            }
            _ => Err("a fault has one of `status` (400-599), `reset: true` or `operation` ({\"code\": 1-16})".into()),
        }
    }

    /// The injected status and message for this request, if a fault matches (and is used up).
    pub(crate) fn take_request(&self, method: &str, path: &str) -> Option<Injected> {
        let mut state = self.lock();
        let index = state.requests.iter().position(|(spec, _)| {
            spec.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method))
                && spec.path.as_deref().is_none_or(|p| path.contains(p))
        })?;
        let (spec, left) = &mut state.requests[index];
        if spec.skip > 0 {
            spec.skip -= 1;
            return None;
        }
        if spec.reset {
            *left -= 1;
            if *left == 0 {
                state.requests.remove(index);
            }
            return Some(Injected::Reset);
        }
        let status = spec.status.unwrap_or(500);
        let message = spec.message.clone().unwrap_or_else(|| format!("injected fault: {status} for {method} {path}"));
        *left -= 1;
        if *left == 0 {
            state.requests.remove(index);
        }
        Some(Injected::Status(status, message))
    }

    /// The injected end of an operation of `verb`, if one is pending (and is used up).
    pub(crate) fn take_operation(&self, verb: &str) -> Option<(i32, String)> {
        let mut state = self.lock();
        let index = state.operations.iter().position(|op| op.verb.as_deref().is_none_or(|v| v == verb))?;
        let op = state.operations.remove(index);
        let message = op.message.unwrap_or_else(|| format!("injected fault: operation {verb} failed"));
        Some((op.code, message))
    }

    pub(crate) fn record(&self, method: &str, path: &str, status: u16) {
        self.lock().log.push(Logged { method: method.to_owned(), path: path.to_owned(), status });
    }

    pub(crate) fn log(&self) -> Vec<Logged> {
        self.lock().log.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> FaultSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_request_fault_matches_method_and_path_and_is_used_up() {
        let faults = Faults::default();
        faults.add(spec(r#"{"method":"GET","path":"/nodes/a","status":503,"times":2}"#)).unwrap();
        assert_eq!(faults.take_request("POST", "/v2/x/nodes/a"), None);
        assert_eq!(faults.take_request("GET", "/v2/x/nodes/b"), None);
        let status = |f: Option<Injected>| match f {
            Some(Injected::Status(s, _)) => Some(s),
            _ => None,
        };
        assert_eq!(status(faults.take_request("get", "/v2/x/nodes/a")), Some(503));
        assert_eq!(status(faults.take_request("GET", "/v2/x/nodes/a")), Some(503));
        assert_eq!(faults.take_request("GET", "/v2/x/nodes/a"), None);
    }

    #[test]
    fn a_reset_fault_after_skipping_lets_the_first_ones_pass() {
        let faults = Faults::default();
        faults.add(spec(r#"{"path":"/operations/","reset":true,"skip":2}"#)).unwrap();
        assert_eq!(faults.take_request("GET", "/v2/p/operations/1"), None);
        assert_eq!(faults.take_request("GET", "/v2/p/operations/1"), None);
        assert_eq!(faults.take_request("GET", "/v2/p/operations/1"), Some(Injected::Reset));
        assert_eq!(faults.take_request("GET", "/v2/p/operations/1"), None, "used up");
        assert!(faults.add(spec(r#"{"reset":true,"status":500}"#)).is_err());
    }

    #[test]
    fn flaky_reads_fail_sometimes_and_writes_never() {
        let faults = Faults::default();
        assert!(!(0..200).any(|_| faults.flaky_hit("GET")), "off without a seed");
        faults.set_flaky(7);
        let hits = (0..400).filter(|_| faults.flaky_hit("GET")).count();
        assert!((5..60).contains(&hits), "{hits}");
        assert!(!(0..200).any(|_| faults.flaky_hit("POST")));
    }

    #[test]
    fn operation_faults_match_their_verb_and_bad_specs_are_refused() {
        let faults = Faults::default();
        faults.add(spec(r#"{"operation":{"code":13,"verb":"delete"}}"#)).unwrap();
        assert_eq!(faults.take_operation("create"), None);
        assert_eq!(faults.take_operation("delete").map(|f| f.0), Some(13));
        assert_eq!(faults.take_operation("delete"), None);
        assert!(faults.add(spec(r#"{"status":200}"#)).is_err());
        assert!(faults.add(spec(r#"{}"#)).is_err());
        assert!(faults.add(spec(r#"{"status":500,"operation":{"code":13}}"#)).is_err());
        assert!(serde_json::from_str::<FaultSpec>(r#"{"stauts":500}"#).is_err());
    }
}

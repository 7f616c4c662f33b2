//! The settings of a `tpu` host ([`TpuSettings`]): zone, project, accelerator type, runtime
//! version, spot/preemptible and the VM's network keys, as the original's config writes them;
//! their checks; and the accelerator table ([`accelerator`]) that turns `v4-32` into a chip, a
//! chip count and a worker count. Plain data and pure functions.
//! Pure: no IO (checked by `cargo xtask tidy`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use theseus_core::keys::KeyError;
use theseus_core::plan::HostKind;

mod accelerator;

pub use accelerator::{Accelerator, Shape, accelerator, shape};

/// The kind of TPU hosts.
pub const KIND: HostKind = HostKind::named("tpu");

/// How long one Cloud TPU API request may take when the host sets no `api_timeout`.
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(30);

/// `type: tpu`: a Google Cloud TPU VM, named as the host (the host name is the node id).
///
/// `Debug` shows every key: none of them is a secret (credentials are found at run time, see
/// [`crate::auth`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpuSettings {
    /// Cluster name (paths as the workers see them).
    pub cluster: String,
    /// The zone of the VM, e.g. `us-central2-b`. Required (checked by [`TpuSettings::check_keys`]).
    #[serde(default)]
    pub zone: String,
    /// The Google Cloud project; unset: the credentials' or gcloud's project (see [`crate::cloud`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The accelerator type, e.g. `v4-32`, `v5litepod-16`, `v6e-8` (see [`accelerator`]).
    #[serde(default)]
    pub accelerator_type: String,
    /// The TPU runtime (software) version to create the VM with, e.g. `tpu-ubuntu2204-base`.
    /// Needed only to create the VM (an existing one is used as it is).
    #[serde(default)]
    pub version: String,
    /// Spot VM (cheaper, may be preempted; created through a queued resource).
    #[serde(default)]
    pub spot: bool,
    /// Preemptible VM (the older form of spot: at most 24 h).
    #[serde(default)]
    pub preemptible: bool,
    /// VPC network of the VM (`networkConfig.network`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// VPC subnetwork of the VM (`networkConfig.subnetwork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnetwork: Option<String>,
    /// Service account email the VM runs as (`serviceAccount.email`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// Reach the workers at their internal addresses (no external IPs are requested on create).
    #[serde(default)]
    pub internal_ip: bool,
    /// Instance metadata of the VM on create (`metadata`), e.g. `startup-script`.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Environment for jobs on this host (exported on every worker).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `uv sync --group` names.
    #[serde(default)]
    pub uv_groups: Vec<String>,
    /// The Cloud TPU API's endpoint, e.g. `https://tpu.googleapis.com/`; unset: env
    /// `CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU`, else Google's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_endpoint: Option<String>,
    /// The user to log in to the workers as; unset: the local user (whose public key goes into
    /// the VM's `ssh-keys` metadata on create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_user: Option<String>,
    /// How long this host's availability probe may take (e.g. `3s`; default 5s). Parsed by
    /// `theseus_core::duration::parse`; more than 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "theseus_core::config::duration_text"
    )]
    pub probe_timeout: Option<String>,
    /// How long one API request may take (e.g. `30s`, `2m`; 1s to 1h; default 30s).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "theseus_core::config::duration_text"
    )]
    pub api_timeout: Option<String>,
}

impl TpuSettings {
    /// Checks what serde cannot: the accelerator type, the zone, the project, the metadata keys,
    /// the endpoint, spot with preemptible, and the timeouts. `path` is `hosts.NAME`; errors
    /// name the full key and the fix.
    ///
    /// # Errors
    /// The first problem found.
    pub fn check_keys(&self, path: &str) -> Result<(), KeyError> {
        let key = |k: &str| format!("{path}.{k}");
        shape(&self.accelerator_type).map_err(|e| KeyError::new(key("accelerator_type"), e))?;
        if self.zone.trim().is_empty() {
            return Err(KeyError::new(key("zone"), "missing: set the zone of the TPU VM, e.g. `zone: us-central2-b`"));
        }
        if !is_simple_name(&self.zone) {
            return Err(KeyError::new(
                key("zone"),
                format!("{:?} is not a zone name (lowercase letters, digits and `-`, e.g. us-central2-b)", self.zone),
            ));
        }
        if let Some(project) = &self.project
            && !is_project_id(project)
        {
            return Err(KeyError::new(
                key("project"),
                format!(
                    "{project:?} is not a project id (lowercase letters, digits and `-`, optionally after `domain:`; the id, not the display name)"
                ),
            ));
        }
        if self.spot && self.preemptible {
            return Err(KeyError::new(
                key("preemptible"),
                "spot and preemptible are both true: choose one (`--tpu-no-preemptible` or `--tpu-on-demand` clears one)",
            ));
        }
        if self.version.contains(char::is_whitespace) || self.version.contains('/') {
            return Err(KeyError::new(
                key("version"),
                format!("{:?} is not a runtime version (e.g. tpu-ubuntu2204-base)", self.version),
            ));
        }
        for name in self.metadata.keys() {
            if !is_metadata_key(name) {
                return Err(KeyError::new(
                    format!("{path}.metadata.{name}"),
                    "metadata keys are letters, digits, `-` and `_`, at most 128 characters (as Compute Engine accepts)",
                ));
            }
        }
        if let Some(endpoint) = &self.api_endpoint {
            check_endpoint(endpoint).map_err(|e| KeyError::new(key("api_endpoint"), e))?;
        }
        if let Some(user) = &self.ssh_user
            && (user.is_empty() || !user.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
        {
            return Err(KeyError::new(
                key("ssh_user"),
                format!("{user:?} is not a user name (letters, digits, `.`, `_`, `-`)"),
            ));
        }
        if let Some(text) = &self.probe_timeout {
            match theseus_core::duration::parse(text) {
                Ok(d) if !d.is_zero() => {}
                Ok(_) => return Err(KeyError::new(key("probe_timeout"), "must be more than 0")),
                Err(e) => return Err(KeyError::new(key("probe_timeout"), format!("{text:?}: {e}"))),
            }
        }
        if let Some(text) = &self.api_timeout {
            parse_api_timeout(text).map_err(|e| KeyError::new(key("api_timeout"), e))?;
        }
        Ok(())
    }

    /// Checks that `name` (the host's name) can be a node id: Google's rule for TPU node ids,
    /// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
    ///
    /// # Errors
    /// A [`KeyError`] at `hosts.NAME` naming the rule.
    pub fn check_name(name: &str) -> Result<(), KeyError> {
        if is_node_id(name) {
            Ok(())
        } else {
            Err(KeyError::new(
                format!("hosts.{name}"),
                "a TPU host's name is its VM's node id: lowercase letters, digits and `-`, starting with a letter, not ending with `-`, at most 63 characters; rename the host",
            ))
        }
    }

    /// The accelerator of the host; `None` when the type does not parse (checked by
    /// [`TpuSettings::check_keys`]) or the chip is unknown.
    pub fn accelerator(&self) -> Option<Accelerator> {
        accelerator(&self.accelerator_type).ok()
    }

    /// The host's API request timeout (`api_timeout`, else [`DEFAULT_API_TIMEOUT`]).
    pub fn api_timeout(&self) -> Duration {
        self.api_timeout.as_deref().and_then(|t| parse_api_timeout(t).ok()).unwrap_or(DEFAULT_API_TIMEOUT)
    }

    /// The host's probe timeout, when set and valid.
    pub fn probe_timeout(&self) -> Option<Duration> {
        self.probe_timeout.as_deref().and_then(|t| theseus_core::duration::parse(t).ok()).filter(|d| !d.is_zero())
    }

    /// How the VM is billed, as the plan says it: `spot`, `preemptible` or `on-demand`.
    pub fn pricing(&self) -> &'static str {
        if self.spot {
            "spot"
        } else if self.preemptible {
            "preemptible"
        } else {
            "on-demand"
        }
    }
}

/// Parses an `api_timeout`: `30s`, `2m`, `1500ms` or plain seconds, from 1s to 1h.
///
/// # Errors
/// A message saying what is accepted.
pub fn parse_api_timeout(text: &str) -> Result<Duration, String> {
    let duration = theseus_core::duration::parse(text).map_err(|e| format!("{text:?}: {e}"))?;
    if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&duration) {
        return Err(format!("{text:?} is out of range; use 1s to 1h"));
    }
    Ok(duration)
}

/// The value of the `theseus-run` label for a run id: lowercase, only `[a-z0-9_-]` (other
/// characters become `-`), at most 63 characters, as Google's label values allow.
pub fn run_label(run_id: &str) -> String {
    let mut out: String = run_id
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' { c } else { '-' })
        .collect();
    out.truncate(63);
    out
}

/// Checks an API endpoint: an `https://` URL with a host (a trailing `/` is optional), or
/// `http://` to this machine (`127.0.0.1`, `localhost`, `[::1]`: a local emulator).
///
/// # Errors
/// What is wrong and an example.
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let bad = || format!("{endpoint:?} is not an https:// URL (e.g. https://tpu.googleapis.com/)");
    let (rest, plain) = match (endpoint.strip_prefix("https://"), endpoint.strip_prefix("http://")) {
        (Some(rest), _) => (rest, false),
        (None, Some(rest)) => (rest, true),
        (None, None) => return Err(bad()),
    };
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.contains(char::is_whitespace) || rest.contains(['?', '#']) {
        return Err(bad());
    }
    let name = host
        .rsplit_once(':')
        .map_or(host, |(name, port)| if port.chars().all(|c| c.is_ascii_digit()) { name } else { host });
    if plain && !matches!(name, "127.0.0.1" | "localhost" | "[::1]") {
        return Err(format!(
            "{endpoint:?}: plain http:// only reaches this machine (127.0.0.1, localhost); use https://"
        ));
    }
    Ok(())
}

fn is_simple_name(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn is_project_id(text: &str) -> bool {
    // Domain-scoped projects are written `example.com:my-project`.
    let id = text.rsplit_once(':').map_or(text, |(domain, id)| if domain.is_empty() { "" } else { id });
    id.len() <= 63 && is_simple_name(id) && id.starts_with(|c: char| c.is_ascii_lowercase())
}

fn is_node_id(text: &str) -> bool {
    text.len() <= 63
        && is_simple_name(text)
        && text.starts_with(|c: char| c.is_ascii_lowercase())
        && !text.ends_with('-')
}

fn is_metadata_key(text: &str) -> bool {
    !text.is_empty() && text.len() <= 128 && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_labels_are_label_safe() {
        assert_eq!(run_label("20261127-2049-Train.A"), "20261127-2049-train-a");
        assert_eq!(run_label(&"x".repeat(80)).len(), 63);
    }

    #[test]
    fn names_follow_googles_node_id_rule() {
        assert!(TpuSettings::check_name("my-tpu-v4").is_ok());
        for bad in ["My-tpu", "4tpu", "tpu-", "tpu_v4", &"a".repeat(64)] {
            let e = TpuSettings::check_name(bad).unwrap_err();
            assert_eq!(e.path, format!("hosts.{bad}"));
        }
    }

    fn host() -> TpuSettings {
        TpuSettings {
            cluster: "gcp".into(),
            zone: "us-central2-b".into(),
            accelerator_type: "v4-8".into(),
            ..TpuSettings::default()
        }
    }

    #[test]
    fn check_keys_names_the_key() {
        assert!(host().check_keys("hosts.t").is_ok());
        let cases: Vec<(TpuSettings, &str)> = vec![
            (TpuSettings { zone: String::new(), ..host() }, "hosts.t.zone"),
            (TpuSettings { zone: "US central".into(), ..host() }, "hosts.t.zone"),
            (TpuSettings { accelerator_type: "v4-7".into(), ..host() }, "hosts.t.accelerator_type"),
            (TpuSettings { project: Some("My Project".into()), ..host() }, "hosts.t.project"),
            (TpuSettings { spot: true, preemptible: true, ..host() }, "hosts.t.preemptible"),
            (
                TpuSettings { metadata: [("bad key".to_owned(), "x".to_owned())].into(), ..host() },
                "hosts.t.metadata.bad key",
            ),
            (TpuSettings { api_endpoint: Some("http://x/".into()), ..host() }, "hosts.t.api_endpoint"),
            (TpuSettings { api_endpoint: Some("ftp://x/".into()), ..host() }, "hosts.t.api_endpoint"),
            (TpuSettings { api_endpoint: Some("https:///v2".into()), ..host() }, "hosts.t.api_endpoint"),
            (TpuSettings { api_timeout: Some("0s".into()), ..host() }, "hosts.t.api_timeout"),
            (TpuSettings { probe_timeout: Some("soon".into()), ..host() }, "hosts.t.probe_timeout"),
            (TpuSettings { ssh_user: Some("a b".into()), ..host() }, "hosts.t.ssh_user"),
        ];
        for (settings, key) in cases {
            assert_eq!(settings.check_keys("hosts.t").unwrap_err().path, key, "{settings:?}");
        }
        let ok = TpuSettings { project: Some("example.com:my-proj".into()), ..host() };
        assert!(ok.check_keys("hosts.t").is_ok());
        for endpoint in
            ["https://tpu.googleapis.com/", "https://127.0.0.1:8443", "http://127.0.0.1:9/", "http://localhost/"]
        {
            assert!(check_endpoint(endpoint).is_ok(), "{endpoint}");
        }
    }

    #[test]
    fn timeouts_and_pricing() {
        assert_eq!(host().api_timeout(), DEFAULT_API_TIMEOUT);
        assert_eq!(TpuSettings { api_timeout: Some("2m".into()), ..host() }.api_timeout(), Duration::from_secs(120));
        assert_eq!(host().pricing(), "on-demand");
        assert_eq!(TpuSettings { spot: true, ..host() }.pricing(), "spot");
    }
}

//! [`SshSettings`]: how theseus connects to a host reached over SSH. Every key is optional, and an
//! unset key leaves the decision to the user's own ssh config (`~/.ssh/config`, or the file of
//! `THESEUS_SSH_CONFIG`), so that a host reachable with `ssh ALIAS` is reachable by theseus.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::keys::{KeyError, de_strict};

/// How the server's host key is checked (`known_hosts`); unset: the user's ssh config decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KnownHosts {
    /// The key must be known (`StrictHostKeyChecking yes`).
    Strict,
    /// Unknown hosts are added, changed keys refused (`accept-new`).
    AcceptNew,
    /// No check (`no`).
    Off,
}

/// The connection keys of a host reached over SSH.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshSettings {
    /// Host key checking (`strict`, `accept-new`, `off`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts: Option<KnownHosts>,
    /// `ConnectTimeout` (e.g. `10s`, or a number of seconds).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "super::duration_text")]
    pub connect_timeout: Option<String>,
    /// Commands theseus runs at once over the connection (sshd's `MaxSessions`, 10 by default;
    /// theseus uses 8 unless told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<u32>,
    /// The only key to offer (`-i FILE` with `IdentitiesOnly yes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_file: Option<String>,
    /// `Port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `User`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `ProxyJump` (`[user@]host[:port]`, comma-separated for several hops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_jump: Option<String>,
    /// Any other ssh option, `{Key: value}` as in `ssh_config(5)`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ssh_options: BTreeMap<String, String>,
    /// Whether commands and jobs run with the user's login environment (what `$SHELL -l` sets:
    /// PATH from `~/.profile`, `module load`s); unset: yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_env: Option<bool>,
}

impl SshSettings {
    /// The keys, as written in a host's table.
    pub const KEYS: &'static [&'static str] = &[
        "known_hosts",
        "connect_timeout",
        "max_sessions",
        "identity_file",
        "port",
        "user",
        "proxy_jump",
        "ssh_options",
        "login_env",
    ];

    /// `ConnectTimeout` when set (validated at load; a value that does not parse is unset).
    pub fn connect_timeout(&self) -> Option<std::time::Duration> {
        self.connect_timeout.as_deref().and_then(|t| crate::duration::parse(t).ok())
    }
}

/// Options theseus decides itself (the connection sharing its transport relies on); an
/// `ssh_options` entry may not set them.
const RESERVED: &[&str] = &["ControlMaster", "ControlPath", "ControlPersist", "BatchMode"];

/// Reads the settings of a host reached over SSH: the connection keys, taken out of `body` and
/// checked, and the type's own keys (`T`), strictly; an unknown key lists both. `path` is the
/// host's key path (`hosts.NAME`).
pub fn parse_with_connection<T: serde::de::DeserializeOwned>(
    mut body: Map<String, Value>,
    path: &str,
) -> Result<(SshSettings, T), KeyError> {
    let connection = take(&mut body, path)?;
    // The connection keys were taken out above: an unknown key lists them too.
    let with_connection = |e: KeyError| match e.message.strip_suffix(')') {
        Some(listed) if e.message.starts_with("unknown key") && listed.contains("(expected one of: ") => {
            KeyError::new(e.path, format!("{listed}, {})", SshSettings::KEYS.join(", ")))
        }
        _ => e,
    };
    let own = de_strict(Value::Object(body), path).map_err(with_connection)?;
    Ok((connection, own))
}

/// Takes the connection keys out of a host's `body` and checks them; `path` is the host's key
/// path (`hosts.NAME`).
pub(crate) fn take(body: &mut Map<String, Value>, path: &str) -> Result<SshSettings, KeyError> {
    let mut keys = Map::new();
    for key in SshSettings::KEYS {
        if let Some(value) = body.remove(*key) {
            keys.insert((*key).to_owned(), value);
        }
    }
    let settings: SshSettings = de_strict(Value::Object(keys), path)?;
    check(&settings, path)?;
    Ok(settings)
}

/// What serde cannot check: values that reach ssh's command line.
fn check(settings: &SshSettings, path: &str) -> Result<(), KeyError> {
    if let Some(text) = &settings.connect_timeout {
        match crate::duration::parse(text) {
            Ok(d) if d.as_secs() >= 1 => {}
            Ok(_) => return Err(KeyError::new(format!("{path}.connect_timeout"), "must be at least 1s")),
            Err(e) => return Err(KeyError::new(format!("{path}.connect_timeout"), e)),
        }
    }
    if settings.max_sessions == Some(0) {
        return Err(KeyError::new(format!("{path}.max_sessions"), "must be at least 1"));
    }
    if settings.port == Some(0) {
        return Err(KeyError::new(format!("{path}.port"), "must be 1 to 65535"));
    }
    for (key, value) in
        [("identity_file", &settings.identity_file), ("user", &settings.user), ("proxy_jump", &settings.proxy_jump)]
    {
        if let Some(value) = value {
            check_value(value).map_err(|m| KeyError::new(format!("{path}.{key}"), m))?;
            if value.starts_with('-') {
                let message = format!("{value:?} starts with `-`, which ssh would read as an option");
                return Err(KeyError::new(format!("{path}.{key}"), message));
            }
        }
    }
    for (key, value) in &settings.ssh_options {
        let at = format!("{path}.ssh_options.{key}");
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(KeyError::new(
                at,
                "not an ssh option name (letters and digits only, as in `ssh_config(5)`, e.g. `ServerAliveCountMax`)",
            ));
        }
        if let Some(reserved) = RESERVED.iter().find(|r| r.eq_ignore_ascii_case(key)) {
            return Err(KeyError::new(
                at,
                format!("`{reserved}` is set by theseus (it shares one connection per host); remove it"),
            ));
        }
        check_value(value).map_err(|m| KeyError::new(at, m))?;
    }
    Ok(())
}

/// A value that goes into an ssh config line: not empty, one line, no control characters.
fn check_value(value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err("empty value".into());
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(format!("contains the control character {:?}; one line of text only", c));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Result<SshSettings, KeyError> {
        let mut body: Map<String, Value> = serde_json::from_str(yaml).unwrap();
        take(&mut body, "hosts.box")
    }

    #[test]
    fn every_key_parses_and_unset_keys_stay_unset() {
        let all = settings(
            r#"{"known_hosts": "accept-new", "connect_timeout": 7, "max_sessions": 4, "identity_file": "~/.ssh/lab",
                "port": 2222, "user": "me", "proxy_jump": "bastion", "ssh_options": {"ServerAliveCountMax": "5"}}"#,
        )
        .unwrap();
        assert_eq!(all.known_hosts, Some(KnownHosts::AcceptNew));
        assert_eq!(all.connect_timeout(), Some(std::time::Duration::from_secs(7)));
        assert_eq!((all.max_sessions, all.port), (Some(4), Some(2222)));
        assert_eq!(all.ssh_options["ServerAliveCountMax"], "5");
        assert_eq!(all.login_env, None);
        assert_eq!(settings(r#"{"login_env": false}"#).unwrap().login_env, Some(false));
        assert_eq!(settings("{}").unwrap(), SshSettings::default());
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        for (json, path, part) in [
            (r#"{"known_hosts": "yes-please"}"#, "hosts.box.known_hosts", "strict, accept-new, off"),
            (r#"{"connect_timeout": "soon"}"#, "hosts.box.connect_timeout", ""),
            (r#"{"max_sessions": 0}"#, "hosts.box.max_sessions", "at least 1"),
            (r#"{"login_env": "maybe"}"#, "hosts.box.login_env", "boolean"),
            (r#"{"user": "-oProxyCommand=x"}"#, "hosts.box.user", "read as an option"),
            (r#"{"ssh_options": {"Proxy Command": "x"}}"#, "hosts.box.ssh_options.Proxy Command", "letters and digits"),
            (
                r#"{"ssh_options": {"controlpath": "/tmp/x"}}"#,
                "hosts.box.ssh_options.controlpath",
                "`ControlPath` is set by theseus",
            ),
            (r#"{"ssh_options": {"ProxyCommand": "a\nb"}}"#, "hosts.box.ssh_options.ProxyCommand", "control character"),
        ] {
            let err = settings(json).unwrap_err();
            assert_eq!(err.path, path, "{json}: {err:?}");
            assert!(err.message.contains(part), "{json}: {err:?}");
        }
    }
}

//! The environment the credential chain and the client read ([`Env`]): a snapshot of the
//! variables Google's tools honour and of the home directory, taken once, so that tests give
//! their own without changing the process's environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The variables theseus reads for Google Cloud, as Google's tools name them.
pub const VARIABLES: &[&str] = &[
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUDSDK_CONFIG",
    "CLOUDSDK_CORE_PROJECT",
    "CLOUDSDK_ACTIVE_CONFIG_NAME",
    "GOOGLE_CLOUD_PROJECT",
    "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU",
    "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
    "SSL_CERT_FILE",
    "GCE_METADATA_HOST",
    "THESEUS_GOOGLE_TOKEN_URI",
    "PATH",
    "HOME",
    "USER",
];

/// A snapshot of the environment (see [`VARIABLES`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Paths and names only, but keep Debug short.
        f.debug_struct("Env").field("vars", &self.vars.keys().collect::<Vec<_>>()).finish()
    }
}

impl Env {
    /// The process's environment.
    pub fn from_process() -> Env {
        Env::from_pairs(VARIABLES.iter().filter_map(|k| std::env::var(k).ok().map(|v| (*k, v))))
    }

    /// Exactly these variables (tests); an empty value counts as unset.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Env {
        Env { vars: pairs.into_iter().map(|(k, v)| (k.into(), v.into())).filter(|(_, v)| !v.is_empty()).collect() }
    }

    /// One more variable.
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Env {
        let value = value.into();
        if value.is_empty() {
            self.vars.remove(key);
        } else {
            self.vars.insert(key.to_owned(), value);
        }
        self
    }

    /// A variable, when set and not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    /// `$HOME`.
    pub fn home(&self) -> Option<&Path> {
        self.get("HOME").map(Path::new)
    }

    /// gcloud's configuration directory: `$CLOUDSDK_CONFIG`, else `~/.config/gcloud`.
    pub fn gcloud_config_dir(&self) -> Option<PathBuf> {
        match self.get("CLOUDSDK_CONFIG") {
            Some(dir) => Some(PathBuf::from(dir)),
            None => self.home().map(|h| h.join(".config/gcloud")),
        }
    }

    /// The extra CA file: `CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE`, else `SSL_CERT_FILE`.
    pub fn extra_ca(&self) -> Option<PathBuf> {
        self.get("CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE").or_else(|| self.get("SSL_CERT_FILE")).map(PathBuf::from)
    }

    /// `program` on `$PATH`, when there.
    pub fn which(&self, program: &str) -> Option<PathBuf> {
        let path = self.get("PATH")?;
        std::env::split_paths(path).map(|dir| dir.join(program)).find(|candidate| is_executable(candidate))
    }

    /// The local user's name (`$USER`).
    pub fn user(&self) -> Option<&str> {
        self.get("USER")
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

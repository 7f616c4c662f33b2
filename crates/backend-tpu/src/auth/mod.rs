//! Google's credential chain ([`Auth`]), in the order of google-auth's `default()` (read, not
//! run: `google/auth/_default.py`): the file `GOOGLE_APPLICATION_CREDENTIALS` names, gcloud's
//! application-default credentials (`$CLOUDSDK_CONFIG` or `~/.config/gcloud`), then
//! `gcloud auth print-access-token` when gcloud is on `PATH`, then the metadata server of a GCE
//! VM (short timeout). Tokens are kept until a minute before they expire, dropped when the API
//! refuses one, and never shown: not in `Debug`, logs or errors.

pub mod env;
mod fetch;
pub mod file;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OnceCell};

pub use env::Env;
pub use file::{CredentialFile, Secret, ServiceAccountKey};

use crate::api::transport::Http;
use crate::api::{AccessToken, ErrorKind, Retry, TokenSource, TpuError};

/// The metadata server's name on GCE (`GCE_METADATA_HOST` overrides it).
pub const METADATA_HOST: &str = "metadata.google.internal";

/// How long the metadata server may take to answer whether it is there.
pub const METADATA_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// A token is renewed this long before it expires.
const EXPIRY_MARGIN: Duration = Duration::from_secs(60);

/// How long a token of `gcloud auth print-access-token` is kept (gcloud does not say when it
/// expires; it keeps its own for up to an hour and renews them itself).
const GCLOUD_TOKEN_LIFE: Duration = Duration::from_secs(300);

/// Where tokens come from.
#[derive(Debug)]
pub enum Source {
    /// A service-account key file.
    ServiceAccount {
        /// The file.
        path: PathBuf,
        /// Its key.
        key: Box<ServiceAccountKey>,
    },
    /// A user's application-default credentials.
    AuthorizedUser {
        /// The file.
        path: PathBuf,
        /// The token endpoint (`THESEUS_GOOGLE_TOKEN_URI`, else Google's).
        token_uri: String,
        /// OAuth client id.
        client_id: String,
        /// OAuth client secret.
        client_secret: Secret,
        /// The refresh token.
        refresh_token: Secret,
        /// The file's `quota_project_id`.
        quota_project: Option<String>,
    },
    /// `gcloud auth print-access-token`.
    Gcloud {
        /// The program.
        program: PathBuf,
    },
    /// The metadata server of the VM theseus runs on.
    Metadata {
        /// `host[:port]`.
        host: String,
    },
}

impl Source {
    /// Where the tokens come from, for messages: `the service-account key /p (sa@x)`.
    pub fn describe(&self) -> String {
        match self {
            Source::ServiceAccount { path, key } => {
                format!("the service-account key {} ({})", path.display(), key.email)
            }
            Source::AuthorizedUser { path, .. } => format!("the application-default credentials {}", path.display()),
            Source::Gcloud { program } => format!("`{} auth print-access-token`", program.display()),
            Source::Metadata { host } => format!("the metadata server at {host}"),
        }
    }
}

#[derive(Debug)]
struct Cached {
    token: AccessToken,
    renew_at: Instant,
}

/// The credential chain with its token cache. Discovery happens at the first token.
#[derive(Debug)]
pub struct Auth {
    env: Env,
    http: Http,
    source: OnceCell<Source>,
    cached: Mutex<Option<Cached>>,
    /// Same as `cached`, readable without waiting, for `invalidate`.
    dropped: std::sync::Mutex<Option<AccessToken>>,
    metadata_timeout: Duration,
    retry: std::sync::Mutex<Retry>,
}

impl Auth {
    /// The chain over `env`, sending with `http`.
    pub fn new(env: Env, http: Http) -> Auth {
        Auth {
            env,
            http,
            source: OnceCell::new(),
            cached: Mutex::new(None),
            dropped: std::sync::Mutex::new(None),
            metadata_timeout: METADATA_PING_TIMEOUT,
            retry: std::sync::Mutex::new(Retry::default()),
        }
    }

    /// How a token endpoint or metadata server that fails for a while is asked again (the
    /// API client's policy, [`Retry::default`] unless set).
    pub fn set_retry(&self, retry: Retry) {
        if let Ok(mut r) = self.retry.lock() {
            *r = retry;
        }
    }

    /// The same chain with another wait for the metadata server (tests).
    pub fn with_metadata_timeout(mut self, timeout: Duration) -> Auth {
        self.metadata_timeout = timeout;
        self
    }

    /// The source of tokens, found on the first call.
    ///
    /// # Errors
    /// No credentials anywhere (one line naming each place looked), or a file that cannot be used.
    pub async fn source(&self) -> Result<&Source, TpuError> {
        self.source.get_or_try_init(|| fetch::discover(&self.env, &self.http, self.metadata_timeout)).await
    }

    /// The project the credentials name or the environment sets, when any: env
    /// `GOOGLE_CLOUD_PROJECT`, `CLOUDSDK_CORE_PROJECT`, the key's `project_id`, the ADC's
    /// `quota_project_id`, gcloud's configured `core/project`, the metadata server's project.
    ///
    /// # Errors
    /// The credentials cannot be found (see [`Auth::source`]).
    pub async fn project(&self) -> Result<Option<String>, TpuError> {
        if let Some(p) = self.env.get("GOOGLE_CLOUD_PROJECT").or_else(|| self.env.get("CLOUDSDK_CORE_PROJECT")) {
            return Ok(Some(p.to_owned()));
        }
        let from_source = match self.source().await? {
            Source::ServiceAccount { key, .. } => key.project.clone(),
            Source::AuthorizedUser { quota_project, .. } => quota_project.clone(),
            Source::Gcloud { .. } => None,
            Source::Metadata { host } => fetch::metadata_project(&self.http, host, self.metadata_timeout).await,
        };
        Ok(from_source.or_else(|| fetch::gcloud_config_project(&self.env)))
    }

    async fn fresh(&self) -> Result<AccessToken, TpuError> {
        let mut cached = self.cached.lock().await;
        let dropped = self.dropped.lock().map(|mut d| d.take()).unwrap_or(None);
        if let Some(c) = cached.as_ref()
            && Instant::now() < c.renew_at
            && dropped.as_ref() != Some(&c.token)
        {
            return Ok(c.token.clone());
        }
        let source = self.source().await?;
        let retry = self.retry.lock().map(|r| *r).unwrap_or_default();
        let (token, life) = fetch::token(source, &self.http, retry).await?;
        let life = match source {
            Source::Gcloud { .. } => GCLOUD_TOKEN_LIFE,
            _ => life.saturating_sub(EXPIRY_MARGIN),
        };
        *cached = Some(Cached { token: token.clone(), renew_at: Instant::now() + life });
        Ok(token)
    }
}

#[async_trait::async_trait]
impl TokenSource for Auth {
    async fn token(&self) -> Result<AccessToken, TpuError> {
        self.fresh().await
    }

    fn invalidate(&self, token: &AccessToken) {
        if let Ok(mut dropped) = self.dropped.lock() {
            *dropped = Some(token.clone());
        }
    }
}

/// A fixed token (tests, and callers that already hold one).
#[derive(Debug, Clone)]
pub struct StaticToken(pub AccessToken);

#[async_trait::async_trait]
impl TokenSource for StaticToken {
    async fn token(&self) -> Result<AccessToken, TpuError> {
        Ok(self.0.clone())
    }

    fn invalidate(&self, _token: &AccessToken) {}
}

/// An error of the token endpoint or of gcloud.
pub(crate) fn refused(source: &Source, why: &str) -> TpuError {
    let fix = match source {
        Source::ServiceAccount { .. } => "check that the key is not deleted or disabled, or make a new key",
        Source::AuthorizedUser { .. } => "run `gcloud auth application-default login` again",
        Source::Gcloud { .. } => "run `gcloud auth login`",
        Source::Metadata { .. } => "check the VM's service account",
    };
    TpuError::new(ErrorKind::Credentials, format!("no Google access token from {}: {why}; {fix}", source.describe()))
}

//! Exec credential plugins (a kubeconfig user's `exec:`, e.g. `aws eks get-token`,
//! `gke-gcloud-auth-plugin`, `kubelogin`), run by theseus itself rather than by kube-rs.
//!
//! kube-rs runs the plugin each time it builds the auth of a client (three times per client:
//! the auth layer, the TLS identity and the refresh deadline) and reports a failure with the
//! `Debug` of the whole command, its `env` values (secrets) included. Here the plugin runs at
//! most once per command and credential: its answer is kept in this process until its
//! `expirationTimestamp` (as client-go keeps it), the client gets the token (or client
//! certificate) it printed, and every failure is one line that names the plugin's command and
//! the kubeconfig's `installHint`, never its arguments nor its `env` values. A token that
//! expires during a long command (`submit --follow` of a training, with EKS tokens of 15 minutes)
//! is fetched again before the next request ([`ExecAuthLayer`]), as client-go does.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use k8s_openapi::jiff::Timestamp;
use kube::config::{ExecConfig, ExecInteractiveMode};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// What a plugin printed that the client uses.
#[derive(Clone)]
pub struct Credential {
    /// A bearer token.
    pub token: Option<String>,
    /// A client certificate and key (PEM), when the plugin gives one instead of a token.
    pub client_cert: Option<(String, String)>,
    /// When the credential expires (`None`: kept for the whole command).
    pub expires: Option<Timestamp>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<redacted>"))
            .field("expires", &self.expires)
            .finish()
    }
}

#[derive(Deserialize)]
struct ExecCredential {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    status: Option<ExecStatus>,
}

#[derive(Deserialize)]
struct ExecStatus {
    #[serde(rename = "expirationTimestamp")]
    expiration_timestamp: Option<String>,
    token: Option<String>,
    #[serde(rename = "clientCertificateData")]
    client_certificate_data: Option<String>,
    #[serde(rename = "clientKeyData")]
    client_key_data: Option<String>,
}

fn cache() -> &'static Mutex<HashMap<[u8; 32], Credential>> {
    static CACHE: OnceLock<Mutex<HashMap<[u8; 32], Credential>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// The credential of `exec` for the API server `server`: the one kept from an earlier run of the
/// same plugin in this process while it has not expired, else the plugin's fresh answer.
///
/// # Errors
/// One line naming the plugin's command (never its arguments or `env` values) and the fix.
pub async fn credential(exec: &ExecConfig, server: &str) -> Result<Credential, String> {
    let key = cache_key(exec, server);
    if let Some(kept) = cache().lock().expect("not poisoned").get(&key)
        && kept.expires.is_none_or(|t| t > Timestamp::now())
    {
        tracing::debug!("exec credential plugin: using the credential kept from its earlier run");
        return Ok(kept.clone());
    }
    let fresh = run(exec).await?;
    cache().lock().expect("not poisoned").insert(key, fresh.clone());
    Ok(fresh)
}

fn cache_key(exec: &ExecConfig, server: &str) -> [u8; 32] {
    let mut hash = Sha256::new();
    let mut feed = |s: &str| {
        hash.update(s.len().to_le_bytes());
        hash.update(s.as_bytes());
    };
    feed(server);
    feed(exec.command.as_deref().unwrap_or(""));
    feed(exec.api_version.as_deref().unwrap_or(""));
    for arg in exec.args.iter().flatten() {
        feed(arg);
    }
    for (name, value) in env_pairs(exec) {
        feed(name);
        feed(value);
    }
    hash.finalize().into()
}

fn env_pairs(exec: &ExecConfig) -> impl Iterator<Item = (&String, &String)> {
    exec.env.iter().flatten().filter_map(|e| Some((e.get("name")?, e.get("value")?)))
}

async fn run(exec: &ExecConfig) -> Result<Credential, String> {
    let Some(command) = exec.command.as_deref().filter(|c| !c.is_empty()) else {
        return Err("the user's exec credential plugin has no `command`; set users[].user.exec.command".to_owned());
    };
    let name = format!("exec credential plugin {command:?}");
    let hint = exec
        .install_hint
        .as_deref()
        .map(|h| h.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|h| !h.is_empty())
        .map_or_else(
            || "install it or fix users[].user.exec.command in the kubeconfig".to_owned(),
            |h| format!("the kubeconfig's installHint: {h}"),
        );
    let interactive = exec.interactive_mode != Some(ExecInteractiveMode::Never);
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(exec.args.iter().flatten());
    cmd.envs(env_pairs(exec));
    for gone in exec.drop_env.iter().flatten() {
        cmd.env_remove(gone);
    }
    let mut spec = serde_json::json!({"interactive": interactive});
    if exec.provide_cluster_info
        && let Some(cluster) = &exec.cluster
    {
        spec["cluster"] = serde_json::to_value(cluster).unwrap_or_default();
    }
    let info = serde_json::json!({
        "apiVersion": exec.api_version.as_deref().unwrap_or("client.authentication.k8s.io/v1"),
        "kind": "ExecCredential",
        "spec": spec,
    });
    cmd.env("KUBERNETES_EXEC_INFO", info.to_string());
    // As client-go: the plugin talks to the user on stderr (and reads stdin when interactive).
    cmd.stdin(if interactive { std::process::Stdio::inherit() } else { std::process::Stdio::null() });
    cmd.stderr(std::process::Stdio::inherit());
    cmd.stdout(std::process::Stdio::piped());
    cmd.kill_on_drop(true);
    tracing::debug!(command, "running the exec credential plugin");
    let out = cmd.output().await.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{name} not found; {hint}"),
        std::io::ErrorKind::PermissionDenied => format!("{name} cannot be run (permission denied); {hint}"),
        _ => format!("{name} cannot be started ({}); {hint}", e.kind()),
    })?;
    if !out.status.success() {
        let how = out.status.code().map_or_else(|| "was killed by a signal".to_owned(), |c| format!("exited with {c}"));
        return Err(format!(
            "{name} {how} (its own messages, if any, are above); run it by hand to see why, or log in again"
        ));
    }
    parse(&out.stdout, exec.api_version.as_deref()).map_err(|problem| format!("{name} {problem}"))
}

/// Reads a plugin's answer (JSON, or the YAML that client-go also tolerates). Its text is never
/// quoted: it holds the credential.
fn parse(stdout: &[u8], expected_version: Option<&str>) -> Result<Credential, String> {
    let answer: ExecCredential = match serde_json::from_slice(stdout) {
        Ok(a) => a,
        Err(json) => serde_saphyr::from_slice(stdout).map_err(|_| {
            format!(
                "did not print an ExecCredential (invalid JSON at line {} column {}); check the plugin's version",
                json.line(),
                json.column()
            )
        })?,
    };
    if let (Some(want), Some(got)) = (expected_version, answer.api_version.as_deref())
        && want != got
    {
        return Err(format!(
            "answered apiVersion {got:?} where the kubeconfig asks for {want:?}; fix users[].user.exec.apiVersion"
        ));
    }
    let Some(status) = answer.status else {
        return Err("printed an ExecCredential without a status".to_owned());
    };
    let expires = match status.expiration_timestamp.as_deref().filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => Some(
            t.parse::<Timestamp>()
                .map_err(|_| format!("printed an expirationTimestamp that is not RFC 3339: {t:?}"))?,
        ),
    };
    let client_cert = match (status.client_certificate_data, status.client_key_data) {
        (Some(cert), Some(key)) if !cert.is_empty() && !key.is_empty() => Some((cert, key)),
        _ => None,
    };
    let token = status.token.filter(|t| !t.is_empty());
    if token.is_none() && client_cert.is_none() {
        return Err("printed neither a token nor a client certificate and key".to_owned());
    }
    Ok(Credential { token, client_cert, expires })
}

/// A failed run of the plugin during a call (its token expired and fetching a new one failed),
/// worded as [`credential`]'s errors: the source of the call's error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct CredentialFailed(pub String);

/// Puts the plugin's token on every request, running the plugin again when the kept token has
/// expired (kept per process, see [`credential`]).
#[derive(Clone)]
pub struct ExecAuthLayer {
    exec: Arc<ExecConfig>,
    server: Arc<str>,
}

impl ExecAuthLayer {
    /// The layer for the plugin `exec` of the API server `server`.
    pub fn new(exec: ExecConfig, server: &str) -> ExecAuthLayer {
        ExecAuthLayer { exec: Arc::new(exec), server: Arc::from(server) }
    }
}

impl<S> tower::Layer<S> for ExecAuthLayer {
    type Service = ExecAuth<S>;

    fn layer(&self, inner: S) -> ExecAuth<S> {
        ExecAuth { inner: Arc::new(tokio::sync::Mutex::new(inner)), auth: self.clone() }
    }
}

/// The service of [`ExecAuthLayer`].
pub struct ExecAuth<S> {
    // Shared so that the (async) credential can be fetched before the inner service is called;
    // the lock is held only while the request is handed over, never during the response.
    inner: Arc<tokio::sync::Mutex<S>>,
    auth: ExecAuthLayer,
}

impl<S> Clone for ExecAuth<S> {
    fn clone(&self) -> Self {
        ExecAuth { inner: self.inner.clone(), auth: self.auth.clone() }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> tower::Service<http::Request<B>> for ExecAuth<S>
where
    S: tower::Service<http::Request<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is awaited on the inner service in `call`, under the lock.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let (inner, auth) = (self.inner.clone(), self.auth.clone());
        Box::pin(async move {
            let credential = credential(&auth.exec, &auth.server).await.map_err(CredentialFailed)?;
            if let Some(token) = credential.token {
                let mut value = http::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    CredentialFailed("the exec credential plugin printed a token that is no HTTP header value".into())
                })?;
                value.set_sensitive(true);
                req.headers_mut().insert(http::header::AUTHORIZATION, value);
            }
            let response = {
                let mut service = inner.lock().await;
                futures::future::poll_fn(|cx| service.poll_ready(cx)).await.map_err(Into::into)?;
                service.call(req)
            };
            response.await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_are_never_quoted() {
        let ok = parse(
            br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"T0K","expirationTimestamp":"2030-01-01T00:00:00Z"}}"#,
            Some("client.authentication.k8s.io/v1"),
        )
        .unwrap();
        assert_eq!(ok.token.as_deref(), Some("T0K"));
        assert_eq!(ok.expires.unwrap().to_string(), "2030-01-01T00:00:00Z");
        let yaml = parse(b"kind: ExecCredential\nstatus:\n  token: Y\n", None).unwrap();
        assert_eq!(yaml.token.as_deref(), Some("Y"));
        let bad = parse(b"{\"status\": {\"token\": \"SECRETTOKEN\"", None).unwrap_err();
        assert!(bad.contains("did not print an ExecCredential") && !bad.contains("SECRETTOKEN"), "{bad}");
        let none = parse(br#"{"status":{}}"#, None).unwrap_err();
        assert!(none.contains("neither a token"), "{none}");
        let version = parse(br#"{"apiVersion":"v9","status":{"token":"x"}}"#, Some("v1")).unwrap_err();
        assert!(version.contains("\"v9\"") && version.contains("apiVersion"), "{version}");
        assert!(!format!("{ok:?}").contains("T0K"));
    }
}

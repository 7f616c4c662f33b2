//! Finding the credentials ([`discover`]) and getting a token from each kind of source
//! ([`token`]): the OAuth2 token endpoint (`jwt-bearer` and `refresh_token` grants, RFC 7523 and
//! RFC 6749 as Google's endpoint takes them), `gcloud auth print-access-token`, and the metadata
//! server (`computeMetadata/v1/instance/service-accounts/default/token` with
//! `Metadata-Flavor: Google`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use serde::Deserialize;

use super::file::{self, CredentialFile, GOOGLE_TOKEN_URI};
use super::{Env, METADATA_HOST, Source, refused};
use crate::api::transport::Http;
use crate::api::{AccessToken, ErrorKind, Retry, TpuError};

/// How long a token request may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `gcloud auth print-access-token` may take.
const GCLOUD_TIMEOUT: Duration = Duration::from_secs(60);

/// Finds the first source of credentials, in google-auth's order (see [`super`]).
///
/// # Errors
/// None found (one line naming each place looked, and the fix), or a file that cannot be used.
pub(super) async fn discover(env: &Env, http: &Http, metadata_timeout: Duration) -> Result<Source, TpuError> {
    let mut looked = Vec::new();
    if let Some(path) = env.get("GOOGLE_APPLICATION_CREDENTIALS") {
        let text = tokio::fs::read(path).await.map_err(|e| {
            TpuError::new(
                ErrorKind::Credentials,
                format!("GOOGLE_APPLICATION_CREDENTIALS names {path}, which cannot be read ({e}); fix the variable or unset it"),
            )
        })?;
        return from_file(env, Path::new(path), &text, "GOOGLE_APPLICATION_CREDENTIALS");
    }
    looked.push("GOOGLE_APPLICATION_CREDENTIALS (not set)".to_owned());
    match env.gcloud_config_dir() {
        Some(dir) => {
            let adc = dir.join("application_default_credentials.json");
            match tokio::fs::read(&adc).await {
                Ok(text) => return from_file(env, &adc, &text, "application-default credentials"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    looked.push(format!("{} (absent)", adc.display()))
                }
                Err(e) => {
                    return Err(TpuError::new(
                        ErrorKind::Credentials,
                        format!("the application-default credentials {} cannot be read ({e})", adc.display()),
                    ));
                }
            }
        }
        None => looked.push("~/.config/gcloud (HOME is not set)".to_owned()),
    }
    match env.which("gcloud") {
        // gcloud installed but not logged in (a shared machine's image often has it) is not a
        // source: its refusal joins the list and the metadata server is asked next.
        Some(program) => {
            let source = Source::Gcloud { program: program.clone() };
            match gcloud_token(&source, &program).await {
                Ok(_) => return Ok(source),
                Err(e) => looked.push(format!("gcloud ({})", e.message)),
            }
        }
        None => looked.push("gcloud (not on PATH)".to_owned()),
    }
    let host = env.get("GCE_METADATA_HOST").unwrap_or(METADATA_HOST).to_owned();
    if ping_metadata(http, &host, metadata_timeout).await {
        return Ok(Source::Metadata { host });
    }
    looked.push(format!("the metadata server {host} (no answer)"));
    Err(TpuError::new(
        ErrorKind::Credentials,
        format!(
            "no Google credentials found; looked at: {}; run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file",
            looked.join(", ")
        ),
    ))
}

fn from_file(env: &Env, path: &Path, text: &[u8], origin: &str) -> Result<Source, TpuError> {
    Ok(match file::parse(text, path, origin)? {
        CredentialFile::ServiceAccount(key) => Source::ServiceAccount { path: path.to_owned(), key },
        CredentialFile::AuthorizedUser { client_id, client_secret, refresh_token, quota_project } => {
            Source::AuthorizedUser {
                path: path.to_owned(),
                token_uri: env.get("THESEUS_GOOGLE_TOKEN_URI").unwrap_or(GOOGLE_TOKEN_URI).to_owned(),
                client_id,
                client_secret,
                refresh_token,
                quota_project,
            }
        }
    })
}

/// A token from `source` and how long it lives; a token endpoint or metadata server that fails
/// for a while (5xx, 429, no answer) is asked again as `retry` says.
///
/// # Errors
/// The source refused or failed (the message names it and the fix, not the secrets).
pub(super) async fn token(source: &Source, http: &Http, retry: Retry) -> Result<(AccessToken, Duration), TpuError> {
    let mut wait = retry.first_wait;
    let mut attempt = 1;
    loop {
        match token_once(source, http).await {
            Err(e) if e.is_transient() && attempt < retry.attempts => {
                tracing::debug!(attempt, error = %e, "token: trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(retry.max_wait);
                attempt += 1;
            }
            other => return other,
        }
    }
}

async fn token_once(source: &Source, http: &Http) -> Result<(AccessToken, Duration), TpuError> {
    match source {
        Source::ServiceAccount { key, .. } => {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
            let assertion = key.assertion(now)?;
            let form = form(&[
                ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                ("assertion", assertion.expose()),
            ]);
            token_endpoint(source, http, &key.token_uri, form).await
        }
        Source::AuthorizedUser { token_uri, client_id, client_secret, refresh_token, .. } => {
            let form = form(&[
                ("grant_type", "refresh_token"),
                ("client_id", client_id),
                ("client_secret", client_secret.expose()),
                ("refresh_token", refresh_token.expose()),
            ]);
            token_endpoint(source, http, token_uri, form).await
        }
        Source::Gcloud { program } => gcloud_token(source, program).await,
        Source::Metadata { host } => {
            let url = format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/token");
            let answer = metadata_get(http, &url, TOKEN_TIMEOUT).await.map_err(|e| unavailable(source, &e.message))?;
            if is_passing(answer.status) {
                return Err(unavailable(source, &format!("it answered HTTP {}", answer.status)));
            }
            if answer.status != 200 {
                return Err(refused(source, &format!("it answered HTTP {}", answer.status)));
            }
            read_token(source, &answer.body)
        }
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TokenRefusal {
    error: String,
    error_description: String,
}

fn read_token(source: &Source, body: &[u8]) -> Result<(AccessToken, Duration), TpuError> {
    let answer: TokenAnswer =
        serde_json::from_slice(body).map_err(|_| refused(source, "its answer holds no access_token"))?;
    if answer.access_token.is_empty() {
        return Err(refused(source, "its answer holds an empty access_token"));
    }
    // Google's tokens live an hour; an answer without `expires_in` is kept for 5 minutes.
    let life = Duration::from_secs(answer.expires_in.unwrap_or(300));
    Ok((AccessToken::new(answer.access_token), life))
}

async fn token_endpoint(
    source: &Source,
    http: &Http,
    uri: &str,
    form: String,
) -> Result<(AccessToken, Duration), TpuError> {
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(form)))
        .map_err(|e| refused(source, &format!("its token URI {uri:?} is not a URL ({e})")))?;
    let answer = http
        .send(request, TOKEN_TIMEOUT, "get an access token")
        .await
        .map_err(|e| if e.is_transient() { unavailable(source, &e.message) } else { refused(source, &e.message) })?;
    if is_passing(answer.status) {
        return Err(unavailable(source, &format!("{uri} answered HTTP {}", answer.status)));
    }
    if answer.status != 200 {
        let refusal: TokenRefusal = serde_json::from_slice(&answer.body).unwrap_or_default();
        let mut why = format!("{uri} answered HTTP {}", answer.status);
        if !refusal.error.is_empty() {
            why.push_str(&format!(": {}", refusal.error));
        }
        if !refusal.error_description.is_empty() {
            why.push_str(&format!(" ({})", refusal.error_description.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
        return Err(refused(source, &why));
    }
    read_token(source, &answer.body)
}

/// Statuses of an endpoint that fails for a while.
fn is_passing(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
}

/// A source that did not answer or failed for a while: worth another try.
fn unavailable(source: &Source, why: &str) -> TpuError {
    TpuError::new(
        ErrorKind::Transient,
        format!("no Google access token from {}: {why}; try again later", source.describe()),
    )
}

async fn gcloud_token(source: &Source, program: &Path) -> Result<(AccessToken, Duration), TpuError> {
    let child = tokio::process::Command::new(program)
        .args(["auth", "print-access-token"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(GCLOUD_TIMEOUT, child).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(refused(source, &format!("it could not run ({e})"))),
        Err(_) => return Err(refused(source, &format!("it did not finish within {}s", GCLOUD_TIMEOUT.as_secs()))),
    };
    if !output.status.success() {
        let code = output.status.code().map_or("a signal".to_owned(), |c| c.to_string());
        return Err(refused(source, &format!("it failed (exit {code}): {}", gcloud_reason(&output.stderr))));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(refused(source, "it printed no token"));
    }
    Ok((AccessToken::new(token), super::GCLOUD_TOKEN_LIFE))
}

/// The line of gcloud's stderr that says why (its `ERROR:` line, else the first), with every long
/// word (a token, a key) replaced by `<redacted>`.
pub(crate) fn gcloud_reason(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let line = lines.iter().find(|l| l.starts_with("ERROR:")).or(lines.first()).copied().unwrap_or("no message");
    let secret_like = |w: &str| {
        w.starts_with("ya29.")
            || (w.len() >= 32 && w.chars().all(|c| c.is_ascii_alphanumeric() || "._-/+=".contains(c)))
    };
    let words: Vec<&str> = line.split_whitespace().map(|w| if secret_like(w) { "<redacted>" } else { w }).collect();
    let mut line = words.join(" ");
    line.truncate(300);
    line
}

async fn metadata_get(http: &Http, url: &str, timeout: Duration) -> Result<crate::api::transport::Answer, TpuError> {
    let request = http::Request::builder()
        .uri(url)
        .header("Metadata-Flavor", "Google")
        .body(Full::new(Bytes::new()))
        .map_err(|e| TpuError::new(ErrorKind::Credentials, format!("bad metadata URL {url}: {e}")))?;
    http.send(request, timeout, "ask the metadata server").await
}

/// Whether a GCE metadata server answers at `host` (it sets `Metadata-Flavor: Google`).
async fn ping_metadata(http: &Http, host: &str, timeout: Duration) -> bool {
    match metadata_get(http, &format!("http://{host}/computeMetadata/v1/"), timeout).await {
        Ok(answer) => answer.headers.get("metadata-flavor").is_some_and(|v| v.as_bytes() == b"Google"),
        Err(_) => false,
    }
}

/// The project of the VM, from the metadata server.
pub(super) async fn metadata_project(http: &Http, host: &str, timeout: Duration) -> Option<String> {
    let answer =
        metadata_get(http, &format!("http://{host}/computeMetadata/v1/project/project-id"), timeout).await.ok()?;
    let text = String::from_utf8(answer.body.to_vec()).ok()?;
    (answer.status == 200 && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// gcloud's configured project: `core/project` of the active configuration
/// (`CLOUDSDK_ACTIVE_CONFIG_NAME`, else `$CLOUDSDK_CONFIG/active_config`, else `default`; in
/// `configurations/config_NAME`).
pub(super) fn gcloud_config_project(env: &Env) -> Option<String> {
    let dir: PathBuf = env.gcloud_config_dir()?;
    let file = std::fs::read_to_string(dir.join("active_config")).ok();
    let active = env
        .get("CLOUDSDK_ACTIVE_CONFIG_NAME")
        .or(file.as_deref().map(str::trim))
        .filter(|a| !a.is_empty())
        .unwrap_or("default");
    let text = std::fs::read_to_string(dir.join("configurations").join(format!("config_{active}"))).ok()?;
    ini_value(&text, "core", "project")
}

/// A value of an INI file (gcloud's properties format).
fn ini_value(text: &str, section: &str, key: &str) -> Option<String> {
    let mut current = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.trim().to_owned();
        } else if current == section
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == key
            && !v.trim().is_empty()
        {
            return Some(v.trim().to_owned());
        }
    }
    None
}

/// `application/x-www-form-urlencoded`.
fn form(pairs: &[(&str, &str)]) -> String {
    let escape = crate::api::query_escape;
    pairs.iter().map(|(k, v)| format!("{}={}", escape(k), escape(v))).collect::<Vec<_>>().join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcloud_errors_keep_the_reason_and_drop_tokens() {
        let stderr = b"WARNING: x\nERROR: (gcloud.auth.print-access-token) There was a problem refreshing your current auth tokens: ya29.a0AfH6SMBxyz 1//0gLongRefreshTokenLooking0123456789abcdef invalid_grant\n";
        let line = gcloud_reason(stderr);
        assert!(line.starts_with("ERROR: (gcloud.auth.print-access-token) There was a problem"), "{line}");
        assert!(!line.contains("ya29") && !line.contains("1//0g"), "{line}");
        assert!(line.ends_with("<redacted> <redacted> invalid_grant"), "{line}");
    }

    #[test]
    fn gcloud_properties_are_read() {
        let text = "[compute]\nzone = x\n[core]\naccount = a@b\nproject = my-proj\n";
        assert_eq!(ini_value(text, "core", "project").as_deref(), Some("my-proj"));
        assert_eq!(ini_value(text, "core", "zone"), None);
    }

    #[test]
    fn forms_are_encoded() {
        assert_eq!(form(&[("grant_type", "urn:a b"), ("x", "a+b")]), "grant_type=urn%3Aa%20b&x=a%2Bb");
    }
}

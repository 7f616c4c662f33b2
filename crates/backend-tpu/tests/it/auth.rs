//! Google's credential chain against wiremock token endpoints and metadata servers, a fake
//! `gcloud` on PATH and real RS256 keys made by openssl: each source in its order, the cache, the
//! refresh after a 401, and that no secret reaches an error or `Debug`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use theseus_backend_tpu::api::transport::Http;
use theseus_backend_tpu::api::{AccessToken, Client, ErrorKind, TokenSource, TpuError};
use theseus_backend_tpu::auth::{Auth, Env};
use theseus_backend_tpu::cloud::Cloud;
use theseus_backend_tpu::config::TpuSettings;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::fake::{FakeTpu, TOKEN};

/// A home with an empty `bin` for PATH, and no metadata server (port 1 refuses at once).
fn bare(dir: &Path) -> Env {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    Env::from_pairs([
        ("HOME", dir.display().to_string()),
        ("PATH", dir.join("bin").display().to_string()),
        ("GCE_METADATA_HOST", "127.0.0.1:1".to_owned()),
    ])
}

fn auth_of(env: Env) -> Auth {
    auth(env)
}

fn auth(env: Env) -> Auth {
    Auth::new(env, Http::new(None, None).unwrap()).with_metadata_timeout(Duration::from_millis(500))
}

/// One request's form fields.
type Form = Vec<(String, String)>;

/// A token endpoint that keeps each request's form and answers `answer`.
#[derive(Clone)]
struct TokenEndpoint {
    forms: Arc<Mutex<Vec<Form>>>,
    answer: ResponseTemplate,
}

impl Respond for TokenEndpoint {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let form = String::from_utf8(request.body.clone()).unwrap();
        let pairs = form
            .split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_owned(), percent_decode(v))
            })
            .collect();
        self.forms.lock().unwrap().push(pairs);
        self.answer.clone()
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

async fn token_endpoint(answer: ResponseTemplate) -> (MockServer, TokenEndpoint) {
    let server = MockServer::start().await;
    let endpoint = TokenEndpoint { forms: Arc::default(), answer };
    Mock::given(method("POST")).and(path("/token")).respond_with(endpoint.clone()).mount(&server).await;
    (server, endpoint)
}

fn granted(token: &str, expires_in: u64) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_json(json!({"access_token": token, "expires_in": expires_in, "token_type": "Bearer"}))
}

fn field<'a>(form: &'a [(String, String)], key: &str) -> &'a str {
    &form.iter().find(|(k, _)| k == key).unwrap().1
}

/// A service-account key file signed by a fresh RSA key; returns it and the public key (DER).
fn service_account_key(dir: &Path, token_uri: &str) -> (PathBuf, Vec<u8>) {
    let pem = dir.join("key.pem");
    let der = dir.join("pub.der");
    let ok = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out"])
        .arg(&pem)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let ok = std::process::Command::new("openssl")
        .args(["rsa", "-RSAPublicKey_out", "-outform", "DER", "-in"])
        .arg(&pem)
        .arg("-out")
        .arg(&der)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let file = dir.join("sa.json");
    let key = json!({
        "type": "service_account",
        "project_id": "p",
        "private_key_id": "kid-1",
        "private_key": std::fs::read_to_string(&pem).unwrap(),
        "client_email": "runner@p.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    });
    std::fs::write(&file, key.to_string()).unwrap();
    (file, std::fs::read(der).unwrap())
}

#[tokio::test]
async fn without_credentials_one_line_names_every_place_looked() {
    let dir = tempfile::tempdir().unwrap();
    let e = auth(bare(dir.path())).token().await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Credentials);
    let adc = dir.path().join(".config/gcloud/application_default_credentials.json");
    for place in [
        "GOOGLE_APPLICATION_CREDENTIALS (not set)".to_owned(),
        format!("{} (absent)", adc.display()),
        "gcloud (not on PATH)".to_owned(),
        "the metadata server 127.0.0.1:1 (no answer)".to_owned(),
        "gcloud auth application-default login".to_owned(),
    ] {
        assert!(e.message.contains(&place), "{place} missing from: {e}");
    }
    assert!(!e.message.contains('\n'));
}

#[tokio::test]
async fn a_service_account_key_signs_a_jwt_the_endpoint_can_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (server, endpoint) = token_endpoint(granted("ya29.sa-token", 3600)).await;
    let token_uri = format!("{}/token", server.uri());
    let (key, public) = service_account_key(dir.path(), &token_uri);
    let env = bare(dir.path()).with("GOOGLE_APPLICATION_CREDENTIALS", key.display().to_string());
    let auth = auth(env);
    let token = auth.token().await.unwrap();
    assert_eq!(token.secret(), "ya29.sa-token");
    assert_eq!(auth.project().await.unwrap().as_deref(), Some("p"));

    let forms = endpoint.forms.lock().unwrap().clone();
    assert_eq!(forms.len(), 1);
    assert_eq!(field(&forms[0], "grant_type"), "urn:ietf:params:oauth:grant-type:jwt-bearer");
    let jwt = field(&forms[0], "assertion");
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(header, json!({"alg": "RS256", "typ": "JWT", "kid": "kid-1"}));
    assert_eq!(claims["iss"], "runner@p.iam.gserviceaccount.com");
    assert_eq!(claims["aud"], token_uri.as_str());
    assert_eq!(claims["scope"], "https://www.googleapis.com/auth/cloud-platform");
    assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 3600);
    let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    let public = ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, public);
    public.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature).expect("a valid RS256 signature");

    // Kept until it expires; a refused token is renewed.
    assert_eq!(auth.token().await.unwrap(), token);
    assert_eq!(endpoint.forms.lock().unwrap().len(), 1);
    auth.invalidate(&token);
    auth.token().await.unwrap();
    assert_eq!(endpoint.forms.lock().unwrap().len(), 2);

    let shown = format!("{auth:?}");
    assert!(!shown.contains("PRIVATE KEY") && !shown.contains("ya29"), "{shown}");
}

#[tokio::test]
async fn a_token_about_to_expire_is_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (server, endpoint) = token_endpoint(granted("ya29.short", 30)).await;
    let (key, _) = service_account_key(dir.path(), &format!("{}/token", server.uri()));
    let auth = auth(bare(dir.path()).with("GOOGLE_APPLICATION_CREDENTIALS", key.display().to_string()));
    auth.token().await.unwrap();
    auth.token().await.unwrap();
    assert_eq!(endpoint.forms.lock().unwrap().len(), 2, "a token with less than a minute left is renewed");
}

fn write_adc(dir: &Path) -> PathBuf {
    let config = dir.join("gcloud-config");
    std::fs::create_dir_all(config.join("configurations")).unwrap();
    std::fs::write(
        config.join("application_default_credentials.json"),
        json!({"type": "authorized_user", "client_id": "cid", "client_secret": "cs-secret", "refresh_token": "rt-secret"})
            .to_string(),
    )
    .unwrap();
    std::fs::write(config.join("configurations/config_default"), "[core]\naccount = me@x\nproject = gproj\n").unwrap();
    config
}

#[tokio::test]
async fn application_default_credentials_refresh_a_users_token() {
    let dir = tempfile::tempdir().unwrap();
    let (server, endpoint) = token_endpoint(granted("ya29.user", 3600)).await;
    let config = write_adc(dir.path());
    let env = bare(dir.path())
        .with("CLOUDSDK_CONFIG", config.display().to_string())
        .with("THESEUS_GOOGLE_TOKEN_URI", format!("{}/token", server.uri()));
    let auth = auth(env);
    assert_eq!(auth.token().await.unwrap().secret(), "ya29.user");
    let forms = endpoint.forms.lock().unwrap().clone();
    assert_eq!(field(&forms[0], "grant_type"), "refresh_token");
    assert_eq!(field(&forms[0], "refresh_token"), "rt-secret");
    assert_eq!(field(&forms[0], "client_secret"), "cs-secret");
    // No quota project in the file: gcloud's configured project, of the active configuration.
    assert_eq!(auth.project().await.unwrap().as_deref(), Some("gproj"));
    std::fs::write(config.join("configurations/config_other"), "[core]\nproject = other-proj\n").unwrap();
    std::fs::write(config.join("active_config"), "other").unwrap();
    let env = bare(dir.path())
        .with("CLOUDSDK_CONFIG", config.display().to_string())
        .with("THESEUS_GOOGLE_TOKEN_URI", format!("{}/token", server.uri()));
    assert_eq!(auth_of(env.clone()).project().await.unwrap().as_deref(), Some("other-proj"));
    let env = env.with("CLOUDSDK_ACTIVE_CONFIG_NAME", "default");
    assert_eq!(auth_of(env.clone()).project().await.unwrap().as_deref(), Some("gproj"));
    let env = env.with("GOOGLE_CLOUD_PROJECT", "env-proj");
    assert_eq!(auth_of(env).project().await.unwrap().as_deref(), Some("env-proj"));
    let shown = format!("{auth:?}");
    assert!(!shown.contains("rt-secret") && !shown.contains("cs-secret"), "{shown}");
}

#[tokio::test]
async fn a_refused_refresh_token_is_one_line_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let refusal = ResponseTemplate::new(400)
        .set_body_json(json!({"error": "invalid_grant", "error_description": "Token has been expired or revoked."}));
    let (server, _) = token_endpoint(refusal).await;
    let config = write_adc(dir.path());
    let env = bare(dir.path())
        .with("CLOUDSDK_CONFIG", config.display().to_string())
        .with("THESEUS_GOOGLE_TOKEN_URI", format!("{}/token", server.uri()));
    let e = auth(env).token().await.unwrap_err();
    assert!(e.message.contains("invalid_grant (Token has been expired or revoked.)"), "{e}");
    assert!(e.message.contains("gcloud auth application-default login"), "{e}");
    assert!(!e.message.contains("rt-secret") && !e.message.contains("cs-secret"), "{e}");
}

#[tokio::test]
async fn the_credentials_variable_comes_first_and_must_be_readable() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_adc(dir.path());
    let env = bare(dir.path())
        .with("CLOUDSDK_CONFIG", config.display().to_string())
        .with("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json");
    let e = auth(env).token().await.unwrap_err();
    assert!(
        e.message.starts_with("GOOGLE_APPLICATION_CREDENTIALS names /nonexistent/key.json, which cannot be read"),
        "{e}"
    );
}

fn fake_gcloud(dir: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let program = dir.join("bin/gcloud");
    std::fs::write(&program, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn gcloud_on_path_prints_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let env = bare(dir.path());
    fake_gcloud(dir.path(), r#"[ "$1 $2" = "auth print-access-token" ] && echo ya29.from-gcloud"#);
    assert_eq!(auth(env).token().await.unwrap().secret(), "ya29.from-gcloud");
}

#[tokio::test]
async fn a_failing_gcloud_says_why_without_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let env = bare(dir.path());
    fake_gcloud(
        dir.path(),
        "echo 'WARNING: noise' >&2; echo 'ERROR: (gcloud.auth.print-access-token) Reauthentication failed. ya29.leaked-token' >&2; exit 1",
    );
    let e = auth(env).token().await.unwrap_err();
    assert!(
        e.message.contains("failed (exit 1): ERROR: (gcloud.auth.print-access-token) Reauthentication failed."),
        "{e}"
    );
    assert!(e.message.contains("gcloud auth login"), "{e}");
    assert!(!e.message.contains("ya29"), "{e}");
}

/// gcloud installed but logged out (a shared image's) is passed over: on a GCE VM the metadata
/// server still gives a token; elsewhere the one line names gcloud's refusal with the rest.
#[tokio::test]
async fn a_logged_out_gcloud_is_passed_over_for_the_metadata_server() {
    let dir = tempfile::tempdir().unwrap();
    let env = bare(dir.path());
    fake_gcloud(
        dir.path(),
        "echo 'ERROR: (gcloud.auth.print-access-token) You do not currently have an active account selected.' >&2; exit 1",
    );
    let e = auth(env).token().await.unwrap_err();
    for place in [
        "GOOGLE_APPLICATION_CREDENTIALS",
        "application_default_credentials.json",
        "no active account",
        "metadata server",
    ] {
        let place = if place == "no active account" { "do not currently have an active account" } else { place };
        assert!(e.message.contains(place), "{place}: {e}");
    }
    let server = MockServer::start().await;
    let flavor = || header("Metadata-Flavor", "Google");
    Mock::given(path("/computeMetadata/v1/"))
        .and(flavor())
        .respond_with(ResponseTemplate::new(200).insert_header("Metadata-Flavor", "Google"))
        .mount(&server)
        .await;
    Mock::given(path("/computeMetadata/v1/instance/service-accounts/default/token"))
        .and(flavor())
        .respond_with(granted("ya29.vm", 3599))
        .mount(&server)
        .await;
    let host = server.uri().trim_start_matches("http://").to_owned();
    let auth = auth(bare(dir.path()).with("GCE_METADATA_HOST", host));
    assert_eq!(auth.token().await.unwrap().secret(), "ya29.vm");
}

#[tokio::test]
async fn the_metadata_server_gives_token_and_project() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let flavor = || header("Metadata-Flavor", "Google");
    Mock::given(path("/computeMetadata/v1/"))
        .and(flavor())
        .respond_with(ResponseTemplate::new(200).insert_header("Metadata-Flavor", "Google"))
        .mount(&server)
        .await;
    Mock::given(path("/computeMetadata/v1/instance/service-accounts/default/token"))
        .and(flavor())
        .respond_with(granted("ya29.vm", 3599))
        .mount(&server)
        .await;
    Mock::given(path("/computeMetadata/v1/project/project-id"))
        .and(flavor())
        .respond_with(ResponseTemplate::new(200).set_body_string("vm-project"))
        .mount(&server)
        .await;
    let host = server.uri().trim_start_matches("http://").to_owned();
    let auth = auth(bare(dir.path()).with("GCE_METADATA_HOST", host));
    assert_eq!(auth.token().await.unwrap().secret(), "ya29.vm");
    assert_eq!(auth.project().await.unwrap().as_deref(), Some("vm-project"));
}

/// Tokens that the API refuses until invalidated once.
#[derive(Debug, Default)]
struct Stale {
    handed: AtomicU32,
    invalidated: AtomicU32,
    always_stale: bool,
}

#[async_trait::async_trait]
impl TokenSource for Stale {
    async fn token(&self) -> Result<AccessToken, TpuError> {
        self.handed.fetch_add(1, Ordering::SeqCst);
        let fresh = !self.always_stale && self.invalidated.load(Ordering::SeqCst) > 0;
        Ok(AccessToken::new(if fresh { TOKEN } else { "expired" }))
    }

    fn invalidate(&self, _token: &AccessToken) {
        self.invalidated.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_401_renews_the_token_once() {
    let (server, fake) = FakeTpu::start().await;
    fake.put_node("t", "READY", false);
    let http = Http::new(None, None).unwrap();
    let stale = Arc::new(Stale::default());
    let client = Client::new(http.clone(), &server.uri(), "p", "us-central2-b", stale.clone(), Duration::from_secs(5));
    assert!(client.get_node("t").await.unwrap().is_some());
    assert_eq!(fake.count("GET"), 2);
    assert_eq!(stale.invalidated.load(Ordering::SeqCst), 1);

    let stale = Arc::new(Stale { always_stale: true, ..Stale::default() });
    let client = Client::new(http, &server.uri(), "p", "us-central2-b", stale, Duration::from_secs(5));
    let e = client.get_node("t").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unauthenticated);
    assert!(e.message.contains("gcloud auth application-default login"), "{e}");
    assert_eq!(fake.count("GET"), 4, "one renewal, not a loop");
}

#[tokio::test]
async fn cloud_finds_endpoint_credentials_and_project_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let (api, fake) = FakeTpu::start().await;
    fake.put_node("t", "READY", true);
    let (tokens, _) = token_endpoint(granted(TOKEN, 3600)).await;
    let (key, _) = service_account_key(dir.path(), &format!("{}/token", tokens.uri()));
    let env = bare(dir.path())
        .with("GOOGLE_APPLICATION_CREDENTIALS", key.display().to_string())
        .with("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU", format!("{}/", api.uri()));
    let settings =
        TpuSettings { zone: "us-central2-b".into(), accelerator_type: "v4-8".into(), ..TpuSettings::default() };
    let cloud = Cloud::with_env("t", &settings, env).unwrap();
    let node = cloud.node().await.unwrap().unwrap();
    assert!(node.created_by_theseus);
    assert_eq!(fake.log(), vec!["GET /v2/projects/p/locations/us-central2-b/nodes/t".to_owned()]);
}

#[tokio::test]
async fn a_bad_endpoint_override_names_the_variable() {
    let env = Env::default().with("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU", "http://example.com/");
    let e = Cloud::with_env("t", &TpuSettings::default(), env).unwrap_err();
    assert!(e.message.starts_with("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU: "), "{e}");
}

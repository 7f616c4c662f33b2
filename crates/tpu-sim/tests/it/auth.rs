//! Bearer tokens and where they come from: the OAuth2 token endpoint (service-account JWT,
//! refresh token), the host's metadata server, the admin API; expiry.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};

use crate::support::{Fixture, PARENT, curl};

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(v.to_string())
}

/// An RS256 JWT as google-auth's service-account credentials make it.
fn jwt(key: &Value, aud: &str, iat: u64, exp: u64) -> String {
    let pem = key["private_key"].as_str().unwrap();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = STANDARD.decode(body).unwrap();
    let pair = ring::signature::RsaKeyPair::from_pkcs8(&der).unwrap();
    let header = json!({"alg": "RS256", "typ": "JWT", "kid": key["private_key_id"]});
    let claims = json!({
        "iss": key["client_email"], "scope": "https://www.googleapis.com/auth/cloud-platform",
        "aud": aud, "iat": iat, "exp": exp,
    });
    let signing_input = format!("{}.{}", b64(&header), b64(&claims));
    let mut sig = vec![0; pair.public().modulus_len()];
    pair.sign(&ring::signature::RSA_PKCS1_SHA256, &ring::rand::SystemRandom::new(), signing_input.as_bytes(), &mut sig)
        .unwrap();
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig))
}

async fn token_call(fx: &Fixture, form: &str) -> (u16, Value) {
    let info = fx.sim.info();
    curl(&info.ca, "POST", &info.token_uri, Some(form.to_owned()), &[], "application/x-www-form-urlencoded").await
}

async fn list_with(fx: &Fixture, token: &str) -> (u16, Value) {
    let info = fx.sim.info();
    let auth = format!("Authorization: Bearer {token}");
    curl(&info.ca, "GET", &fx.url(&format!("{PARENT}/nodes")), None, &[&auth], "").await
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test]
async fn requests_without_a_valid_token_are_unauthenticated() {
    let fx = Fixture::api_only().await;
    let info = fx.sim.info();
    let (status, err) = curl(&info.ca, "GET", &fx.url(&format!("{PARENT}/nodes")), None, &[], "").await;
    assert_eq!((status, err["error"]["status"].as_str()), (401, Some("UNAUTHENTICATED")));
    assert_eq!(err["error"]["details"][0]["reason"], "CREDENTIALS_MISSING");
    assert_eq!(list_with(&fx, "ya29.made-up").await.0, 401);
    assert_eq!(list_with(&fx, &fx.token).await.0, 200);
    fx.admin("POST", "tokens:expire", json!({})).await;
    let (status, err) = list_with(&fx, &fx.token).await;
    assert_eq!((status, err["error"]["details"][0]["reason"].as_str()), (401, Some("ACCESS_TOKEN_EXPIRED")));
    fx.admin("POST", "token-lifetime", json!({"seconds": 7})).await;
    let (_, fresh) = fx.admin("POST", "tokens", json!({})).await;
    assert_eq!(fresh["expires_in"], 7);
}

#[tokio::test]
async fn a_service_account_key_gets_a_token_with_a_signed_jwt() {
    let fx = Fixture::api_only().await;
    let (status, key) = fx.admin("POST", "keys", json!({"project": "p1"})).await;
    assert_eq!(status, 200, "{key}");
    assert_eq!(
        (key["type"].as_str(), key["token_uri"].as_str()),
        (Some("service_account"), Some(fx.sim.info().token_uri.as_str()))
    );
    let grant = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=";
    let good = jwt(&key, &fx.sim.info().token_uri, now(), now() + 3600);
    let (status, reply) = token_call(&fx, &format!("{grant}{good}")).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["token_type"], "Bearer");
    assert_eq!(list_with(&fx, reply["access_token"].as_str().unwrap()).await.0, 200);

    // Another key's signature, a wrong audience, a too-long life: all refused.
    let (_, other) =
        fx.admin("POST", "keys", json!({"project": "p1", "email": "other@p1.iam.gserviceaccount.com"})).await;
    let mut forged = other.clone();
    forged["client_email"] = key["client_email"].clone();
    let bad_sig = jwt(&forged, &fx.sim.info().token_uri, now(), now() + 3600);
    let (status, reply) = token_call(&fx, &format!("{grant}{bad_sig}")).await;
    assert_eq!((status, reply["error"].as_str()), (400, Some("invalid_grant")), "{reply}");
    let bad_aud = jwt(&key, "https://oauth2.googleapis.com/token", now(), now() + 3600);
    assert_eq!(token_call(&fx, &format!("{grant}{bad_aud}")).await.0, 400);
    let too_long = jwt(&key, &fx.sim.info().token_uri, now(), now() + 7200);
    assert_eq!(token_call(&fx, &format!("{grant}{too_long}")).await.0, 400);
    let (status, reply) = token_call(&fx, "grant_type=client_credentials").await;
    assert_eq!((status, reply["error"].as_str()), (400, Some("unsupported_grant_type")));
}

#[tokio::test]
async fn an_authorized_user_refreshes_and_the_metadata_server_gives_tokens() {
    let fx = Fixture::api_only().await;
    let (_, user) = fx.admin("POST", "authorized-user", json!({})).await;
    assert_eq!(user["type"], "authorized_user");
    let form = format!(
        "grant_type=refresh_token&client_id={}&client_secret={}&refresh_token={}",
        user["client_id"].as_str().unwrap(),
        user["client_secret"].as_str().unwrap(),
        user["refresh_token"].as_str().unwrap().replace('/', "%2F"),
    );
    let (status, reply) = token_call(&fx, &form).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(list_with(&fx, reply["access_token"].as_str().unwrap()).await.0, 200);

    let meta =
        format!("http://{}/computeMetadata/v1/instance/service-accounts/default/token", fx.sim.info().metadata_host);
    let m = meta.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl").args(["-sS", "-H", "Metadata-Flavor: Google", &m]).output().unwrap()
    })
    .await
    .unwrap();
    let token: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list_with(&fx, token["access_token"].as_str().unwrap()).await.0, 200);
    let bare = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &meta])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&bare.stdout), "403", "no Metadata-Flavor header, no token");
}

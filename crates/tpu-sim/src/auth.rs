//! Google's OAuth2 token endpoint, as far as service-account keys and `authorized_user`
//! credentials use it, and the bearer tokens every API call must carry.
//!
//! - `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`: `assertion` is an RS256 JWT
//!   signed with a service-account key the simulator made (`POST /sim/v1/keys`); it checks the
//!   signature against that key's public half, `iss` (the key's `client_email`), `aud` (its
//!   token URI), `scope`, and that `iat`/`exp` are at most an hour apart and current (RFC 7523
//!   and Google's "Using OAuth 2.0 for Server to Server Applications"; read, not run).
//! - `grant_type=refresh_token` with `client_id`, `client_secret`, `refresh_token` of an
//!   `authorized_user` file it made (`POST /sim/v1/authorized-user`).
//!
//! Errors are OAuth2's (`{"error": "invalid_grant", "error_description": ...}`, HTTP 400;
//! `invalid_client` 401). Tokens live `expires_in` seconds (default 3599, as Google's; the admin API
//! shortens it or expires every token at once to test refresh).
//!
//! Google's signing keys are RSA; ring verifies RSA but cannot make keys, so the simulator asks
//! `openssl genpkey` for them (openssl must be on PATH to make key files).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::Rng as _;
use serde_json::{Value, json};

use crate::error::ApiError;

/// The scope theseus (and gcloud) asks for.
pub(crate) const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";

struct Key {
    public_der: Vec<u8>,
}

struct User {
    client_secret: String,
    refresh_token: String,
}

#[derive(Default)]
struct State {
    tokens: HashMap<String, Instant>,
    keys: HashMap<String, Key>,
    users: HashMap<String, User>,
    lifetime: Option<Duration>,
}

/// Issued tokens and the credentials that may ask for them.
#[derive(Default)]
pub(crate) struct Auth {
    state: Mutex<State>,
}

/// An OAuth2 error reply: HTTP status and body.
pub(crate) type OAuthError = (u16, Value);

fn oauth_error(http: u16, error: &str, description: &str) -> OAuthError {
    (http, json!({"error": error, "error_description": description}))
}

fn random_string(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rng();
    (0..len).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl Auth {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new access token: the reply of the token endpoint.
    pub(crate) fn issue(&self) -> Value {
        let mut state = self.lock();
        // Google's token endpoint answers `expires_in: 3599`.
        let lifetime = state.lifetime.unwrap_or(Duration::from_secs(3599));
        let token = format!("ya29.sim-{}", random_string(48));
        state.tokens.insert(token.clone(), Instant::now() + lifetime);
        json!({"access_token": token, "expires_in": lifetime.as_secs(), "token_type": "Bearer"})
    }

    /// Tokens issued from now on live `secs` seconds.
    pub(crate) fn set_lifetime(&self, secs: u64) {
        self.lock().lifetime = Some(Duration::from_secs(secs));
    }

    /// Every token issued so far expires now.
    pub(crate) fn expire_all(&self) {
        let now = Instant::now();
        for expiry in self.lock().tokens.values_mut() {
            *expiry = now;
        }
    }

    /// Checks an `Authorization` header value.
    pub(crate) fn check(&self, header: Option<&str>) -> Result<(), ApiError> {
        let Some(header) = header else { return Err(ApiError::unauthenticated("CREDENTIALS_MISSING")) };
        let Some(token) = header.strip_prefix("Bearer ") else {
            return Err(ApiError::unauthenticated("ACCESS_TOKEN_TYPE_UNSUPPORTED"));
        };
        match self.lock().tokens.get(token.trim()) {
            Some(expiry) if *expiry > Instant::now() => Ok(()),
            Some(_) => Err(ApiError::unauthenticated("ACCESS_TOKEN_EXPIRED")),
            None => Err(ApiError::unauthenticated("ACCESS_TOKEN_TYPE_UNSUPPORTED")),
        }
    }

    /// Remembers the public half of a PKCS#8 RSA key for `email`.
    pub(crate) fn add_key(&self, email: &str, pkcs8_der: &[u8]) -> Result<(), String> {
        let pair = ring::signature::RsaKeyPair::from_pkcs8(pkcs8_der).map_err(|e| format!("not an RSA key: {e}"))?;
        use ring::signature::KeyPair as _;
        let public_der = pair.public_key().as_ref().to_vec();
        self.lock().keys.insert(email.to_owned(), Key { public_der });
        Ok(())
    }

    /// A new `authorized_user` credential, as `gcloud auth application-default login` writes it.
    pub(crate) fn new_user(&self) -> Value {
        let client_id = format!("{}.apps.googleusercontent.com", random_string(24).to_lowercase());
        let client_secret = format!("GOCSPX-{}", random_string(28));
        let refresh_token = format!("1//sim-{}", random_string(40));
        self.lock().users.insert(
            client_id.clone(),
            User { client_secret: client_secret.clone(), refresh_token: refresh_token.clone() },
        );
        json!({
            "type": "authorized_user",
            "client_id": client_id,
            "client_secret": client_secret,
            "refresh_token": refresh_token,
            "universe_domain": "googleapis.com",
        })
    }

    /// `POST {token_uri}` with a form body; `token_uri` is what the JWT's `aud` must be.
    pub(crate) fn token_endpoint(&self, form: &HashMap<String, String>, token_uri: &str) -> Result<Value, OAuthError> {
        match form.get("grant_type").map(String::as_str) {
            Some("urn:ietf:params:oauth:grant-type:jwt-bearer") => {
                let assertion = form
                    .get("assertion")
                    .ok_or_else(|| oauth_error(400, "invalid_request", "Missing required parameter: assertion"))?;
                self.verify_jwt(assertion, token_uri)?;
                Ok(self.issue())
            }
            Some("refresh_token") => {
                let get = |k: &str| form.get(k).map(String::as_str).unwrap_or("");
                let state = self.lock();
                let user = state
                    .users
                    .get(get("client_id"))
                    .filter(|u| u.client_secret == get("client_secret"))
                    .ok_or_else(|| oauth_error(401, "invalid_client", "The OAuth client was not found."))?;
                if user.refresh_token != get("refresh_token") {
                    return Err(oauth_error(400, "invalid_grant", "Bad Request"));
                }
                drop(state);
                Ok(self.issue())
            }
            Some(other) => Err(oauth_error(400, "unsupported_grant_type", &format!("Invalid grant_type: {other}"))),
            None => Err(oauth_error(400, "unsupported_grant_type", "Invalid grant_type: ")),
        }
    }

    fn verify_jwt(&self, jwt: &str, token_uri: &str) -> Result<(), OAuthError> {
        let bad = |what: &str| oauth_error(400, "invalid_grant", what);
        let parts: Vec<&str> = jwt.split('.').collect();
        let [header, claims, signature] = parts.as_slice() else { return Err(bad("Invalid JWT: not three parts.")) };
        let decode = |part: &str| -> Result<Value, OAuthError> {
            let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|_| bad("Invalid JWT: bad base64url."))?;
            serde_json::from_slice(&bytes).map_err(|_| bad("Invalid JWT: not JSON."))
        };
        let (header_json, claims_json) = (decode(header)?, decode(claims)?);
        if header_json["alg"] != "RS256" {
            return Err(bad("Invalid JWT: the algorithm must be RS256."));
        }
        let iss = claims_json["iss"].as_str().unwrap_or_default();
        let state = self.lock();
        let key = state.keys.get(iss).ok_or_else(|| bad("Invalid JWT Signature."))?;
        let signature = URL_SAFE_NO_PAD.decode(signature).map_err(|_| bad("Invalid JWT Signature."))?;
        let signed = format!("{header}.{claims}");
        ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, &key.public_der)
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| bad("Invalid JWT Signature."))?;
        drop(state);
        if claims_json["aud"].as_str() != Some(token_uri) {
            return Err(bad("Invalid JWT: the audience must be the token URI."));
        }
        let scopes = claims_json["scope"].as_str().unwrap_or_default();
        if !scopes.split_whitespace().any(|s| s == CLOUD_PLATFORM) {
            return Err(bad("Invalid OAuth scope or ID token audience provided."));
        }
        let (iat, exp) = (claims_json["iat"].as_i64(), claims_json["exp"].as_i64());
        let now = unix_now();
        match (iat, exp) {
            (Some(iat), Some(exp)) if exp > iat && exp - iat <= 3600 && iat <= now + 300 && exp > now - 300 => Ok(()),
            _ => Err(bad(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your \
                 iat and exp values in the JWT claim.",
            )),
        }
    }
}

/// The DER inside the first PEM block of `pem`.
pub(crate) fn pem_der(pem: &str) -> Option<Vec<u8>> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----") && !l.is_empty()).collect();
    STANDARD.decode(body).ok()
}

/// A service-account key file (Google's JSON format) for `email` in `project`, whose
/// `token_uri` is the simulator's; the simulator remembers its public key.
pub(crate) fn service_account_key(auth: &Auth, project: &str, email: &str, token_uri: &str) -> Result<Value, String> {
    let out = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| {
            format!("cannot run `openssl genpkey` to make a service-account key (is openssl installed?): {e}")
        })?;
    if !out.status.success() {
        return Err(format!("`openssl genpkey` failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let pem = String::from_utf8(out.stdout).map_err(|_| "`openssl genpkey` printed no PEM".to_owned())?;
    let der = pem_der(&pem).ok_or("`openssl genpkey` printed no PEM")?;
    auth.add_key(email, &der)?;
    let key_id: String = (0..40).map(|_| format!("{:x}", rand::rng().random_range(0..16u8))).collect();
    let client_id: String = (0..21).map(|_| char::from(b'0' + rand::rng().random_range(0..10u8))).collect();
    Ok(json!({
        "type": "service_account",
        "project_id": project,
        "private_key_id": key_id,
        "private_key": pem,
        "client_email": email,
        "client_id": client_id,
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": format!("https://www.googleapis.com/robot/v1/metadata/x509/{email}"),
        "universe_domain": "googleapis.com",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expire_and_unknown_ones_are_refused() {
        let auth = Auth::default();
        let token = auth.issue()["access_token"].as_str().unwrap().to_owned();
        assert!(auth.check(Some(&format!("Bearer {token}"))).is_ok());
        assert_eq!(auth.check(None).unwrap_err().http, 401);
        assert_eq!(auth.check(Some("Bearer nope")).unwrap_err().http, 401);
        assert_eq!(auth.check(Some(&format!("Basic {token}"))).unwrap_err().http, 401);
        auth.expire_all();
        let err = auth.check(Some(&format!("Bearer {token}"))).unwrap_err();
        assert_eq!(err.details[0]["reason"], "ACCESS_TOKEN_EXPIRED");
        auth.set_lifetime(5);
        assert_eq!(auth.issue()["expires_in"], 5);
    }

    #[test]
    fn refresh_grant_checks_all_three_values() {
        let auth = Auth::default();
        let user = auth.new_user();
        let mut form: HashMap<String, String> = ["client_id", "client_secret", "refresh_token"]
            .iter()
            .map(|k| ((*k).to_owned(), user[*k].as_str().unwrap().to_owned()))
            .collect();
        form.insert("grant_type".into(), "refresh_token".into());
        assert!(auth.token_endpoint(&form, "u").unwrap()["access_token"].is_string());
        form.insert("refresh_token".into(), "1//other".into());
        assert_eq!(auth.token_endpoint(&form, "u").unwrap_err().1["error"], "invalid_grant");
        form.insert("client_secret".into(), "wrong".into());
        assert_eq!(auth.token_endpoint(&form, "u").unwrap_err().0, 401);
        form.insert("grant_type".into(), "password".into());
        assert_eq!(auth.token_endpoint(&form, "u").unwrap_err().1["error"], "unsupported_grant_type");
    }
}

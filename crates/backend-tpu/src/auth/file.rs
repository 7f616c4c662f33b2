//! Google credential files: a service-account key (`"type": "service_account"`) or the
//! application-default credentials gcloud writes for a user (`"type": "authorized_user"`), read
//! into [`CredentialFile`] whose `Debug` hides the key and the refresh token; and the signing of a
//! service account's JWT assertion (RS256 with the key's PKCS#8 `private_key`, as google-auth's
//! `service_account.Credentials._make_authorization_grant_assertion` builds it; read, not run).

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use rustls_pki_types::PrivatePkcs8KeyDer;
use rustls_pki_types::pem::PemObject;
use serde::Deserialize;

use crate::api::{ErrorKind, TpuError};

/// Google's OAuth2 token endpoint (`authorized_user` credentials name none).
pub const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// The scope theseus asks for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// Text that must not be shown: `Debug` prints `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The text (to send it, never to show it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A usable credential file.
#[derive(Debug)]
pub enum CredentialFile {
    /// A service-account key.
    ServiceAccount(Box<ServiceAccountKey>),
    /// A user's refresh token (`gcloud auth application-default login`).
    AuthorizedUser {
        /// OAuth client id.
        client_id: String,
        /// OAuth client secret.
        client_secret: Secret,
        /// The refresh token.
        refresh_token: Secret,
        /// The project that quota is charged to, when the file names one.
        quota_project: Option<String>,
    },
}

/// A service account's key: who it is, where it gets tokens, and the signing key.
pub struct ServiceAccountKey {
    /// `client_email`.
    pub email: String,
    /// `private_key_id` (the JWT's `kid`).
    pub key_id: String,
    /// `token_uri`.
    pub token_uri: String,
    /// `project_id`.
    pub project: Option<String>,
    key: RsaKeyPair,
}

impl fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("email", &self.email)
            .field("token_uri", &self.token_uri)
            .field("project", &self.project)
            .field("key", &"<redacted>")
            .finish()
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Raw {
    #[serde(rename = "type")]
    kind: String,
    client_email: String,
    private_key: String,
    private_key_id: String,
    token_uri: String,
    project_id: Option<String>,
    client_id: String,
    client_secret: String,
    refresh_token: String,
    quota_project_id: Option<String>,
}

/// Reads a credential file's text. `path` and `origin` (e.g. `GOOGLE_APPLICATION_CREDENTIALS`)
/// only name it in errors; no error quotes the file's content.
///
/// # Errors
/// Not JSON, a type theseus does not use, a missing field, or a key that is not an RSA PKCS#8 key.
pub fn parse(text: &[u8], path: &Path, origin: &str) -> Result<CredentialFile, TpuError> {
    let fail = |why: String| {
        TpuError::new(
            ErrorKind::Credentials,
            format!(
                "the Google credentials file {} ({origin}) cannot be used: {why}; make a new one with `gcloud auth application-default login` or download a service-account key",
                path.display()
            ),
        )
    };
    // serde's message could quote a value: say only where it went wrong.
    let raw: Raw = serde_json::from_slice(text)
        .map_err(|e| fail(format!("it is not a JSON credentials file (line {}, column {})", e.line(), e.column())))?;
    let need =
        |field: &str, value: &str| if value.is_empty() { Err(fail(format!("it has no `{field}`"))) } else { Ok(()) };
    match raw.kind.as_str() {
        "service_account" => {
            need("client_email", &raw.client_email)?;
            need("private_key", &raw.private_key)?;
            let der = PrivatePkcs8KeyDer::from_pem_slice(raw.private_key.as_bytes())
                .map_err(|_| fail("its `private_key` is not a PEM PKCS#8 key (-----BEGIN PRIVATE KEY-----)".into()))?;
            let key = RsaKeyPair::from_pkcs8(der.secret_pkcs8_der())
                .map_err(|e| fail(format!("its `private_key` is not a usable RSA key ({e})")))?;
            let token_uri = if raw.token_uri.is_empty() { GOOGLE_TOKEN_URI.to_owned() } else { raw.token_uri };
            Ok(CredentialFile::ServiceAccount(Box::new(ServiceAccountKey {
                email: raw.client_email,
                key_id: raw.private_key_id,
                token_uri,
                project: raw.project_id.filter(|p| !p.is_empty()),
                key,
            })))
        }
        "authorized_user" => {
            need("client_id", &raw.client_id)?;
            need("client_secret", &raw.client_secret)?;
            need("refresh_token", &raw.refresh_token)?;
            Ok(CredentialFile::AuthorizedUser {
                client_id: raw.client_id,
                client_secret: Secret(raw.client_secret),
                refresh_token: Secret(raw.refresh_token),
                quota_project: raw.quota_project_id.filter(|p| !p.is_empty()),
            })
        }
        "" => Err(fail("it has no `type`".into())),
        other => Err(fail(format!(
            "its type {other:?} is not supported (theseus reads \"service_account\" and \"authorized_user\")"
        ))),
    }
}

impl ServiceAccountKey {
    /// The signed JWT assertion of the `jwt-bearer` grant: `iss` the account, `aud` the token
    /// URI, `scope` cloud-platform, valid from `now` (seconds since the epoch) for an hour.
    ///
    /// # Errors
    /// Signing failed (it does not with a key [`parse`] accepted).
    pub fn assertion(&self, now: u64) -> Result<Secret, TpuError> {
        let mut header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
        if !self.key_id.is_empty() {
            header["kid"] = serde_json::Value::String(self.key_id.clone());
        }
        let claims = serde_json::json!({
            "iss": self.email,
            "scope": SCOPE,
            "aud": self.token_uri,
            "iat": now,
            "exp": now + 3600,
        });
        let signing_input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing_input.as_bytes(), &mut signature).map_err(
            |_| TpuError::new(ErrorKind::Credentials, format!("signing with the key of {} failed", self.email)),
        )?;
        Ok(Secret(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> &'static Path {
        Path::new("/x/key.json")
    }

    #[test]
    fn authorized_user_files_hide_their_secrets() {
        let text = br#"{"type": "authorized_user", "client_id": "id", "client_secret": "cs-secret", "refresh_token": "rt-secret", "quota_project_id": "qp"}"#;
        let file = parse(text, path(), "ADC").unwrap();
        let shown = format!("{file:?}");
        assert!(!shown.contains("cs-secret") && !shown.contains("rt-secret"), "{shown}");
        assert!(matches!(file, CredentialFile::AuthorizedUser { quota_project: Some(ref p), .. } if p == "qp"));
    }

    #[test]
    fn bad_files_name_the_file_and_not_the_content() {
        for (text, says) in [
            (&b"{not json secret-value"[..], "not a JSON credentials file"),
            (br#"{"type": "external_account"}"#, "\"external_account\" is not supported"),
            (br#"{"type": "authorized_user", "client_id": "i", "client_secret": "s"}"#, "no `refresh_token`"),
            (
                br#"{"type": "service_account", "client_email": "e", "private_key": "secret-value"}"#,
                "not a PEM PKCS#8 key",
            ),
        ] {
            let e = parse(text, path(), "GOOGLE_APPLICATION_CREDENTIALS").unwrap_err();
            assert!(e.message.contains(says) && e.message.contains("/x/key.json"), "{e}");
            assert!(!e.message.contains("secret-value"), "{e}");
        }
    }
}

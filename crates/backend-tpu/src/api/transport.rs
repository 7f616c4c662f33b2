//! One HTTP(S) exchange with a deadline: the transport of the API client, the token endpoint
//! and the metadata server. TLS is rustls with the platform's roots plus the extra CA that gcloud
//! users name (`CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE`, else `SSL_CERT_FILE`); HTTPS goes through
//! `HTTPS_PROXY` unless `NO_PROXY` matches (a CONNECT tunnel, as curl does).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioExecutor;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::error::{ErrorKind, TpuError};

/// Time allowed to open a connection (TCP and TLS).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An answer: status, headers and the whole body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
}

type Direct = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;
type Proxied = Client<HttpsConnector<Tunnel<HttpConnector>>, Full<Bytes>>;

/// A pool of connections; cheap to clone.
#[derive(Clone)]
pub struct Http {
    direct: Direct,
    /// HTTPS through the proxy of `HTTPS_PROXY`, with the matcher that says which hosts use it.
    proxied: Option<(Arc<Matcher>, Proxied)>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http").field("proxy", &self.proxied.is_some()).finish()
    }
}

/// The TLS settings: platform roots and the extra CA file (PEM), if any.
///
/// # Errors
/// The extra CA file cannot be read or holds no certificate.
pub fn tls_config(extra_ca: Option<&Path>) -> Result<rustls::ClientConfig, TpuError> {
    let mut roots = rustls::RootCertStore::empty();
    // Unreadable platform certificates are skipped, as curl does; the extra CA may be all we need.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = extra_ca {
        let config_error = |why: String| {
            TpuError::new(
                ErrorKind::Other,
                format!(
                    "the CA file {} ({why}) cannot be used; fix or unset CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE / SSL_CERT_FILE",
                    path.display()
                ),
            )
        };
        let pem = std::fs::read(path).map_err(|e| config_error(e.to_string()))?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok).collect();
        if certs.is_empty() {
            return Err(config_error("no PEM certificate in it".into()));
        }
        roots.add_parsable_certificates(certs);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TpuError::new(ErrorKind::Other, format!("TLS setup failed: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

impl Http {
    /// A client trusting the platform's roots and `extra_ca`; `proxy` decides which hosts go
    /// through a proxy (`Matcher::from_env()` reads `HTTPS_PROXY`/`NO_PROXY`).
    ///
    /// # Errors
    /// [`tls_config`]'s.
    pub fn new(extra_ca: Option<&Path>, proxy: Option<Matcher>) -> Result<Http, TpuError> {
        let tls = tls_config(extra_ca)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http.clone());
        let direct = Client::builder(TokioExecutor::new()).build(connector);
        let proxied = proxy.and_then(|matcher| {
            // One proxy for every host it covers: the one it names for Google's endpoint.
            let probe: Uri = "https://tpu.googleapis.com/".parse().ok()?;
            let intercept = matcher.intercept(&probe)?;
            let mut tunnel = Tunnel::new(intercept.uri().clone(), http);
            if let Some(auth) = intercept.basic_auth() {
                tunnel = tunnel.with_auth(auth.clone());
            }
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_only()
                .enable_http1()
                .wrap_connector(tunnel);
            Some((Arc::new(matcher), Client::builder(TokioExecutor::new()).build(connector)))
        });
        Ok(Http { direct, proxied })
    }

    /// Sends `request` and reads the whole answer within `timeout`. Transport failures and the
    /// deadline are [`ErrorKind::Transient`] errors naming `what` (never the headers).
    ///
    /// # Errors
    /// The connection failed, or no whole answer came within `timeout`.
    pub async fn send(&self, request: Request<Full<Bytes>>, timeout: Duration, what: &str) -> Result<Answer, TpuError> {
        let host = request.uri().host().unwrap_or_default().to_owned();
        // This machine is never reached through a proxy (local emulators, the simulator).
        let local = matches!(host.as_str(), "127.0.0.1" | "localhost" | "[::1]" | "::1");
        let via_proxy = request.uri().scheme_str() == Some("https")
            && !local
            && self.proxied.as_ref().is_some_and(|(m, _)| m.intercept(request.uri()).is_some());
        let exchange = async {
            let response = match (&self.proxied, via_proxy) {
                (Some((_, client)), true) => client.request(request).await,
                _ => self.direct.request(request).await,
            }
            .map_err(|e| transport(&host, what, &e))?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.map_err(|e| transport(&host, what, &e))?.to_bytes();
            Ok(Answer { status: parts.status.as_u16(), headers: parts.headers, body })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(TpuError::new(
                ErrorKind::Transient,
                format!(
                    "{host} did not answer within {}s ({what}); check the network, or raise the host's `api_timeout`",
                    timeout.as_secs_f32()
                ),
            )),
        }
    }
}

/// A transport failure with its causes on one line.
fn transport(host: &str, what: &str, error: &(dyn std::error::Error + 'static)) -> TpuError {
    let mut causes = vec![error.to_string()];
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !causes.contains(&text) {
            causes.push(text);
        }
        source = s.source();
    }
    let mut message = format!("could not reach {host} ({what}): {}", causes.join(": "));
    // A certificate that does not verify will not verify on the next attempt either.
    let mut kind = ErrorKind::Transient;
    if message.contains("certificate") {
        kind = ErrorKind::Other;
        message.push_str(
            "; if the endpoint's certificate comes from a CA of its own, name its PEM file in CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
        );
    }
    TpuError::new(kind, message)
}

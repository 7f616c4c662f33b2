//! HTTPS as a private endpoint of Google's API would be reached in a test: a CA made at start
//! (ECDSA P-256), and a serving certificate it signs for `127.0.0.1` and `localhost` (and any
//! extra names). Clients trust the CA through the file the simulator writes (`ca.pem`), as gcloud
//! does through `core/custom_ca_certs_file`.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rcgen::{Issuer, KeyUsagePurpose};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

/// Making the CA, the certificate or the TLS configuration failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen could not make or sign a certificate.
    #[error("cannot make the simulator's certificates")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("cannot set up the simulator's TLS")]
    Rustls(#[from] rustls::Error),
}

/// The CA's PEM and the acceptor that presents the serving certificate.
pub(crate) struct Pki {
    pub(crate) ca_pem: String,
    pub(crate) acceptor: TlsAcceptor,
}

impl Pki {
    /// A new CA and a serving certificate for `127.0.0.1`, `localhost` and `extra_names`.
    pub(crate) fn generate(extra_names: &[String]) -> Result<Pki, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name = common_name("theseus-tpu-sim CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut sans = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        sans.extend(extra_names.iter().filter(|n| !sans.contains(n)).cloned().collect::<Vec<_>>());
        let server_key = KeyPair::generate()?;
        let mut server = CertificateParams::new(sans)?;
        server.distinguished_name = common_name("tpu.googleapis.com");
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server.signed_by(&server_key, &issuer)?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let chain: Vec<CertificateDer<'static>> = vec![server_cert.der().clone(), ca_cert.der().clone()];
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Pki { ca_pem: ca_cert.pem(), acceptor: TlsAcceptor::from(Arc::new(config)) })
    }
}

fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

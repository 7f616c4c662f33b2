//! HTTPS as kind's API server serves it: a CA made at start (ECDSA P-256, as kubeadm's), a
//! serving certificate it signs for `127.0.0.1`, `localhost` and the in-cluster names, and
//! client certificates it signs or verifies (kube-apiserver's `--client-ca-file`): the
//! certificate's Common Name is the user, each Organization a group
//! (`staging/src/k8s.io/apiserver/pkg/authentication/request/x509/x509.go`, `CommonNameUserConversion`).
//!
//! A client certificate is optional at the handshake (as with kube-apiserver, which then tries
//! bearer tokens); one that the CA did not sign fails the handshake.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

mod der;

pub use der::subject_identity;

/// Making the CA, a certificate or the TLS configuration failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen could not make or sign a certificate.
    #[error("cannot make the simulator's certificates")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("cannot set up the simulator's TLS")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built.
    #[error("cannot set up client certificate verification")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// A certificate and its private key, PEM-encoded (what a kubeconfig carries as
/// `client-certificate-data` / `client-key-data`, base64 of these).
#[derive(Clone)]
pub struct CertPair {
    /// `-----BEGIN CERTIFICATE-----`...
    pub cert_pem: String,
    /// `-----BEGIN PRIVATE KEY-----`... (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for CertPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertPair").field("cert_pem", &self.cert_pem).finish_non_exhaustive()
    }
}

/// The simulator's CA, with what it serves and verifies.
pub(crate) struct Pki {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    acceptor: TlsAcceptor,
}

impl Pki {
    /// A new CA (`CN=kubernetes`, as kubeadm names its CA), a serving certificate it signs
    /// (for `127.0.0.1`, `localhost`, the in-cluster names and `extra_names`: IP addresses or
    /// DNS names), and the TLS acceptor that presents it and verifies client certificates
    /// against the CA.
    pub(crate) fn generate(extra_names: &[String]) -> Result<Pki, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name = name("kubernetes", None);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_cert = ca.self_signed(&ca_key)?;
        let ca_der = ca_cert.der().clone();
        let issuer = Issuer::new(ca, ca_key);

        let server_key = KeyPair::generate()?;
        let mut sans: Vec<String> =
            ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
                .map(str::to_owned)
                .to_vec();
        sans.extend(extra_names.iter().filter(|n| !sans.contains(n)).cloned().collect::<Vec<_>>());
        let mut server = CertificateParams::new(sans)?;
        server.distinguished_name = name("kube-apiserver", None);
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server.signed_by(&server_key, &issuer)?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(ca_der)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let chain: Vec<CertificateDer<'static>> = vec![server_cert.der().clone(), ca_cert.der().clone()];
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)?;
        // HTTP/1.1 only: exec, attach and port-forward upgrade the connection.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Pki { issuer, ca_pem: ca_cert.pem(), acceptor: TlsAcceptor::from(Arc::new(config)) })
    }

    /// The CA certificate, PEM.
    pub(crate) fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The acceptor every connection goes through.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// A client certificate for `user` (CN) in `group` (O), signed by the CA: what kind puts
    /// in its kubeconfig (`CN=kubernetes-admin`, `O=kubeadm:cluster-admins`). (rcgen writes one
    /// attribute of a type; certificates with several O, made elsewhere, are read whole.)
    pub(crate) fn issue_client(&self, user: &str, group: Option<&str>) -> Result<CertPair, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = name(user, group);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertPair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// The DER of the first PEM block of `pem`.
pub(crate) fn pem_to_der(pem: &str) -> Option<Vec<u8>> {
    use rustls::pki_types::pem::PemObject as _;
    CertificateDer::from_pem_slice(pem.as_bytes()).ok().map(|der| der.to_vec())
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(org) = organization {
        dn.push(DnType::OrganizationName, org);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_names_its_user_and_group() {
        let pki = Pki::generate(&[]).unwrap();
        let pair = pki.issue_client("kubernetes-admin", Some("system:masters")).unwrap();
        let der = pem_to_der(&pair.cert_pem).unwrap();
        assert_eq!(subject_identity(&der), Some((Some("kubernetes-admin".into()), vec!["system:masters".into()])));
        let alone = pki.issue_client("researcher", None).unwrap();
        assert_eq!(subject_identity(&pem_to_der(&alone.cert_pem).unwrap()), Some((Some("researcher".into()), vec![])));
        // The CA's own subject: CN kubernetes, no O.
        assert_eq!(subject_identity(&pem_to_der(pki.ca_pem()).unwrap()), Some((Some("kubernetes".into()), vec![])));
        assert!(!format!("{pair:?}").contains("PRIVATE KEY"), "the key stays out of Debug");
    }
}

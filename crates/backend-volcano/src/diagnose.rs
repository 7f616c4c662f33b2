//! What went wrong on the way to an API server, read from a client error's chain of causes: a
//! TLS verdict (unknown authority, name mismatch, expiry, not TLS at all), a name that does not
//! resolve, a refused connection, a proxy that would not tunnel. Pure: the words, the fix, and
//! whether another attempt can help (a handshake that failed verification never succeeds on
//! retry).

/// A diagnosed connection failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    /// What failed, e.g. `TLS: the server's certificate is signed by an unknown authority`.
    pub problem: String,
    /// What to do about it.
    pub fix: String,
    /// Whether trying again can succeed.
    pub transient: bool,
}

/// The causes of `err`, outermost first, each on its own (lower-cased) line.
pub fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        text.push_str(&e.to_string().to_lowercase());
        text.push('\n');
        cause = e.source();
    }
    text
}

/// The first cause of `err` of type `T`.
pub fn find_cause<'a, T: std::error::Error + 'static>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a T> {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        cause = e.source();
    }
    None
}

/// Diagnoses the error text `chain` (see [`chain_text`]) of a call to `server` (through `proxy`,
/// described, when one is used). `None`: not a connection failure this module knows.
pub fn diagnose(chain: &str, server: &str, proxy: Option<&str>) -> Option<Diagnosis> {
    let host = server.split("://").nth(1).unwrap_or(server).split(['/', '?']).next().unwrap_or("").to_owned();
    let refresh = "refresh the kubeconfig (your cloud's get-credentials command, or the cluster's admin.conf)";
    let tls = |what: &str, fix: String| Some(Diagnosis { problem: format!("TLS: {what}"), fix, transient: false });
    // A self-signed certificate that no trusted CA signed is reported as a CA used as an end
    // entity; kubectl says `unknown authority` for both.
    if chain.contains("unknownissuer")
        || chain.contains("unknown issuer")
        || chain.contains("unknownca")
        || chain.contains("causedasendentity")
    {
        return tls(
            "the server's certificate is signed by an unknown authority (x509: certificate signed by unknown authority)",
            format!("the kubeconfig's certificate-authority(-data) is another cluster's, or missing: {refresh}"),
        );
    }
    if let Some(at) = chain.find("certificate not valid for name") {
        let detail = chain[at..].lines().next().unwrap_or("").trim_end_matches(['.', ')']).to_owned();
        return tls(
            &format!("the server's certificate does not name the address in the kubeconfig ({detail})"),
            format!(
                "the kubeconfig's server address is not one the certificate was made for (a stale kubeconfig after a cluster rebuild?): {refresh}, or set the cluster's tls-server-name to a name the certificate has"
            ),
        );
    }
    if chain.contains("notvalidforname") {
        return tls(
            "the server's certificate does not name the address in the kubeconfig",
            format!("{refresh}, or set the cluster's tls-server-name to a name the certificate has"),
        );
    }
    if chain.contains("certificate expired") || chain.contains("expired") && chain.contains("certificate") {
        return tls(
            "the server's certificate has expired (x509: certificate has expired)",
            "ask the cluster's admin to renew the API server certificate, and check this machine's clock".into(),
        );
    }
    if chain.contains("not valid yet") || chain.contains("notvalidyet") {
        return tls(
            "the server's certificate is not valid yet",
            "check this machine's clock (and time zone); else ask the cluster's admin".into(),
        );
    }
    if chain.contains("invalidcontenttype")
        || chain.contains("corrupt message")
        || chain.contains("invalid content type")
    {
        return tls(
            "the server does not speak TLS on that port",
            "check the scheme and port of the kubeconfig's server address (https:// for an API server)".into(),
        );
    }
    if chain.contains("invalid peer certificate") || chain.contains("certificate") && chain.contains("tls") {
        let detail = chain.lines().find(|l| l.contains("certificate")).unwrap_or("").trim().to_owned();
        return tls(
            &format!("the server's certificate was refused ({detail})"),
            format!("check the kubeconfig's certificate-authority and server address: {refresh}"),
        );
    }
    let via = proxy.map(|p| format!(" through the proxy {p}")).unwrap_or_default();
    if proxy.is_some() && (chain.contains("tunnel") || chain.contains("socks")) {
        let refused = chain.contains("refused");
        return Some(Diagnosis {
            problem: if refused {
                format!("the proxy {} refused the connection", proxy.unwrap_or(""))
            } else {
                format!(
                    "the proxy {} did not open a tunnel to {host} ({})",
                    proxy.unwrap_or(""),
                    chain.lines().find(|l| l.contains("tunnel") || l.contains("socks")).unwrap_or("").trim()
                )
            },
            fix: "check the proxy's address and that it allows CONNECT to the API server's port, or exempt the server with NO_PROXY".into(),
            transient: refused,
        });
    }
    if chain.contains("name or service not known")
        || chain.contains("no address associated")
        || chain.contains("nodename nor servname")
        || chain.contains("no such host")
    {
        return Some(Diagnosis {
            problem: format!("no such host: {} does not resolve{via}", host.split(':').next().unwrap_or(&host)),
            fix: "check the kubeconfig's server address, and your DNS or VPN".into(),
            transient: false,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_verdicts_are_named_with_their_fix_and_never_retried() {
        let server = "https://127.0.0.1:6443/";
        let unknown =
            diagnose("client error (connect)\ninvalid peer certificate: unknownissuer\n", server, None).unwrap();
        assert!(unknown.problem.contains("unknown authority") && !unknown.transient, "{unknown:?}");
        let name = diagnose(
            "client error (connect)\ninvalid peer certificate: certificate not valid for name \"127.0.0.1\"; certificate is only valid for dnsname(\"k8s\")\n",
            server,
            None,
        )
        .unwrap();
        assert!(name.problem.contains("only valid for") && name.fix.contains("stale kubeconfig"), "{name:?}");
        let expired =
            diagnose("invalid peer certificate: certificate expired: verification time 5 (unix)\n", server, None)
                .unwrap();
        assert!(expired.problem.contains("expired") && expired.fix.contains("clock"), "{expired:?}");
        let plain = diagnose("received corrupt message of type invalidcontenttype\n", server, None).unwrap();
        assert!(plain.problem.contains("does not speak TLS"), "{plain:?}");
    }

    #[test]
    fn unresolvable_names_and_proxies_are_named() {
        let dns = diagnose(
            "client error (connect)\ndns error\nfailed to lookup address information: name or service not known\n",
            "https://k8s.invalid:6443/",
            None,
        )
        .unwrap();
        assert_eq!(dns.problem, "no such host: k8s.invalid does not resolve");
        assert!(!dns.transient);
        let tunnel = diagnose(
            "client error (connect)\ntunnel error: unsuccessful\n",
            "https://k8s:6443",
            Some("http://p:3128 (from HTTPS_PROXY)"),
        )
        .unwrap();
        assert!(tunnel.problem.contains("did not open a tunnel to k8s:6443"), "{tunnel:?}");
        assert_eq!(diagnose("connection refused\n", "https://k8s:6443", None), None);
    }
}

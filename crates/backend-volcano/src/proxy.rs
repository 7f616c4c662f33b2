//! Which proxy reaches an API server, decided as kubectl (client-go and Go's `httpproxy`) decides
//! it; pure, from the cluster URL, the kubeconfig's `proxy-url` and the proxy variables.
//!
//! - The cluster's `proxy-url` is used for every request, whatever the environment says.
//! - Else `HTTPS_PROXY` (then `https_proxy`) for an `https` server, `HTTP_PROXY` (then
//!   `http_proxy`) for an `http` one; a value without a scheme is an `http://` proxy.
//! - `NO_PROXY` (then `no_proxy`) exempts a server: `*` all of them; an IP (`10.0.0.5`), a CIDR
//!   (`10.0.0.0/8`), a domain (`corp.example` matches it and its subdomains, `.corp.example`
//!   subdomains only, `*.corp.example` as `.corp.example`), each optionally with `:port`.
//! - `localhost` and loopback addresses never go through an environment proxy (Go's rule: a kind
//!   cluster on 127.0.0.1 keeps working with a corporate proxy exported).
//!
//! kube-rs's own choice differs (it matches `NO_PROXY` against the proxy, not the server, and
//! only reads `HTTPS_PROXY`), so [`crate::client`] replaces it with this one.

use std::net::IpAddr;

/// The proxy variables of the environment (each the upper-case one, else the lower-case one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    /// `HTTPS_PROXY` / `https_proxy`.
    pub https: Option<String>,
    /// `HTTP_PROXY` / `http_proxy`.
    pub http: Option<String>,
    /// `NO_PROXY` / `no_proxy`.
    pub no_proxy: Option<String>,
}

impl ProxyEnv {
    /// Reads the variables of this process.
    pub fn from_process() -> ProxyEnv {
        ProxyEnv::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `get` (upper case first, as Go does).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> ProxyEnv {
        let any = |upper: &str, lower: &str| {
            get(upper).filter(|v| !v.is_empty()).or_else(|| get(lower)).filter(|v| !v.is_empty())
        };
        ProxyEnv {
            https: any("HTTPS_PROXY", "https_proxy"),
            http: any("HTTP_PROXY", "http_proxy"),
            no_proxy: any("NO_PROXY", "no_proxy"),
        }
    }
}

/// The proxy chosen for a server, and where it was configured (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    /// The proxy URL (`http://`, `https://` or `socks5://`).
    pub url: http::Uri,
    /// `the kubeconfig's proxy-url`, `HTTPS_PROXY`, `HTTP_PROXY`.
    pub from: &'static str,
}

impl Proxy {
    /// The proxy without credentials, for messages: `http://proxy:3128 (from HTTPS_PROXY)`.
    pub fn describe(&self) -> String {
        format!("{} (from {})", redact(&self.url), self.from)
    }
}

/// The proxy for `server`: the kubeconfig's `proxy_url` when set, else the environment's unless
/// `NO_PROXY` or loopback exempts the server. `None`: connect directly.
///
/// # Errors
/// A one-line message naming the setting and what is accepted (a proxy URL is never quoted
/// with its credentials).
pub fn choose(server: &http::Uri, proxy_url: Option<&str>, env: &ProxyEnv) -> Result<Option<Proxy>, String> {
    if let Some(url) = proxy_url.map(str::trim).filter(|u| !u.is_empty()) {
        return parse(url, "the kubeconfig's proxy-url").map(Some);
    }
    let (value, from) = match server.scheme_str() {
        Some("https") => (env.https.as_deref(), "HTTPS_PROXY"),
        Some("http") => (env.http.as_deref(), "HTTP_PROXY"),
        _ => return Ok(None),
    };
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(None) };
    let Some(host) = server.host() else { return Ok(None) };
    let port = server.port_u16().unwrap_or(if server.scheme_str() == Some("https") { 443 } else { 80 });
    if !use_proxy(host, port, env.no_proxy.as_deref().unwrap_or("")) {
        return Ok(None);
    }
    parse(value, from).map(Some)
}

/// Whether a request to `host:port` goes through an environment proxy under `no_proxy`.
pub fn use_proxy(host: &str, port: u16, no_proxy: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" {
        return false;
    }
    let ip = host.parse::<IpAddr>().ok();
    if ip.is_some_and(|ip| ip.is_loopback()) {
        return false;
    }
    for entry in no_proxy.split(',').map(|e| e.trim().to_ascii_lowercase()).filter(|e| !e.is_empty()) {
        if entry == "*" {
            return false;
        }
        if let Some((net, bits)) = entry.split_once('/') {
            if let (Some(ip), Ok(net), Ok(bits)) = (ip, net.parse::<IpAddr>(), bits.parse::<u8>())
                && in_cidr(ip, net, bits)
            {
                return false;
            }
            continue;
        }
        let (name, entry_port) = split_port(&entry);
        if entry_port.is_some_and(|p| p != port) {
            continue;
        }
        if let Ok(entry_ip) = name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            if ip == Some(entry_ip) {
                return false;
            }
            continue;
        }
        let name = name.trim_start_matches('*').trim_end_matches('.');
        let exempt = match name.strip_prefix('.') {
            Some(_) => host.ends_with(name),
            None => host == name || host.ends_with(&format!(".{name}")),
        };
        if exempt {
            return false;
        }
    }
    true
}

fn split_port(entry: &str) -> (&str, Option<u16>) {
    // `host:port`, `[v6]:port`; a bare IPv6 address has several colons and no port.
    if let Some(rest) = entry.strip_prefix('[')
        && let Some((addr, tail)) = rest.split_once(']')
    {
        return (addr, tail.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match entry.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => match port.parse() {
            Ok(p) => (name, Some(p)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits)) };
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - u32::from(bits)) };
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

fn parse(value: &str, from: &'static str) -> Result<Proxy, String> {
    let with_scheme = if value.contains("://") { value.to_owned() } else { format!("http://{value}") };
    let mut url: http::Uri = with_scheme.parse().map_err(|_| {
        format!("{from} is not a proxy URL; use http://HOST:PORT, https://HOST:PORT or socks5://HOST:PORT")
    })?;
    if url.scheme_str() == Some("socks5h") {
        // kube's SOCKS connector lets the proxy resolve the name, which is what socks5h asks.
        let mut parts = url.into_parts();
        parts.scheme = Some("socks5".parse().expect("a scheme"));
        url = http::Uri::from_parts(parts).map_err(|_| format!("{from} is not a proxy URL"))?;
    }
    match url.scheme_str() {
        Some("http" | "https" | "socks5") if url.host().is_some_and(|h| !h.is_empty()) => Ok(Proxy { url, from }),
        Some("http" | "https" | "socks5") => Err(format!("{from} ({}) names no proxy host", redact(&url))),
        _ => Err(format!(
            "{from} ({}) has a scheme theseus cannot use; use http://, https:// or socks5://",
            redact(&url)
        )),
    }
}

/// `url` without user and password.
pub fn redact(url: &http::Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("http");
    let host = url.host().unwrap_or("");
    match url.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(https: Option<&str>, http: Option<&str>, no_proxy: Option<&str>) -> ProxyEnv {
        ProxyEnv { https: https.map(Into::into), http: http.map(Into::into), no_proxy: no_proxy.map(Into::into) }
    }

    fn chosen(server: &str, proxy_url: Option<&str>, env: &ProxyEnv) -> Option<String> {
        choose(&server.parse().unwrap(), proxy_url, env).unwrap().map(|p| p.describe())
    }

    #[test]
    fn the_variable_follows_the_server_scheme_upper_case_first() {
        let lookup = |name: &str| match name {
            "HTTPS_PROXY" => Some("http://upper:3128".to_owned()),
            "https_proxy" => Some("http://lower:3128".to_owned()),
            "http_proxy" => Some("plain:8080".to_owned()),
            "no_proxy" => Some(".corp".to_owned()),
            _ => None,
        };
        let e = ProxyEnv::from_lookup(lookup);
        assert_eq!(e, env(Some("http://upper:3128"), Some("plain:8080"), Some(".corp")));
        assert_eq!(
            chosen("https://k8s.example:6443", None, &e).as_deref(),
            Some("http://upper:3128 (from HTTPS_PROXY)")
        );
        assert_eq!(chosen("http://k8s.example:8080", None, &e).as_deref(), Some("http://plain:8080 (from HTTP_PROXY)"));
        assert_eq!(
            chosen("https://k8s.example", None, &env(None, Some("p:1"), None)),
            None,
            "no fallback to HTTP_PROXY"
        );
    }

    #[test]
    fn no_proxy_matches_hosts_domains_ips_cidrs_ports_and_star() {
        let e = |no: &str| env(Some("http://p:3128"), None, Some(no));
        let via = |server: &str, no: &str| chosen(server, None, &e(no)).is_some();
        assert!(!via("https://k8s.corp.example:6443", "corp.example"));
        assert!(!via("https://corp.example:6443", "corp.example"));
        assert!(!via("https://k8s.corp.example:6443", ".corp.example"));
        assert!(via("https://corp.example:6443", ".corp.example"));
        assert!(!via("https://k8s.corp.example:6443", "*.corp.example"));
        assert!(via("https://notcorp.example:6443", "corp.example"));
        assert!(!via("https://10.1.2.3:6443", "10.0.0.0/8"));
        assert!(via("https://11.1.2.3:6443", "10.0.0.0/8"));
        assert!(!via("https://10.1.2.3:6443", "x, 10.1.2.3"));
        assert!(!via("https://10.1.2.3:6443", "10.1.2.3:6443"));
        assert!(via("https://10.1.2.3:6443", "10.1.2.3:443"));
        assert!(!via("https://k8s.example", "k8s.example:443"));
        assert!(!via("https://[fd00::5]:6443", "fd00::/8"));
        assert!(!via("https://anything:1", "*"));
        assert!(!via("https://K8S.Corp.Example:6443", "CORP.example"));
        assert!(via("https://k8s.example:6443", ""));
    }

    #[test]
    fn loopback_never_goes_through_an_environment_proxy_but_proxy_url_always_applies() {
        let e = env(Some("http://p:3128"), Some("http://p:3128"), None);
        for server in ["https://127.0.0.1:6443", "https://localhost:6443", "http://[::1]:8080", "https://127.5.0.1"] {
            assert_eq!(chosen(server, None, &e), None, "{server}");
        }
        assert_eq!(
            chosen("https://127.0.0.1:6443", Some("socks5://127.0.0.1:1080"), &env(None, None, Some("*"))).as_deref(),
            Some("socks5://127.0.0.1:1080 (from the kubeconfig's proxy-url)")
        );
        assert_eq!(
            chosen("https://k8s", Some("socks5h://bastion:1080"), &ProxyEnv::default()).as_deref(),
            Some("socks5://bastion:1080 (from the kubeconfig's proxy-url)")
        );
    }

    #[test]
    fn bad_proxies_are_named_without_their_credentials() {
        let err =
            choose(&"https://k8s".parse().unwrap(), None, &env(Some("ftp://u:SECRET@p:21"), None, None)).unwrap_err();
        assert!(err.contains("HTTPS_PROXY") && err.contains("ftp://p:21") && !err.contains("SECRET"), "{err}");
        let err =
            choose(&"https://k8s".parse().unwrap(), Some("http://u:SECRET@ bad"), &ProxyEnv::default()).unwrap_err();
        assert!(err.contains("proxy-url") && !err.contains("SECRET"), "{err}");
        let ok = choose(&"https://k8s".parse().unwrap(), None, &env(Some("http://u:SECRET@p:3128"), None, None));
        assert_eq!(ok.unwrap().unwrap().describe(), "http://p:3128 (from HTTPS_PROXY)");
    }
}

//! Reaching a cluster: which kubeconfig a host uses (a pure decision) and building the
//! `kube::Client` from it with our timeouts, the proxy kubectl would use ([`crate::proxy`]), the
//! credential of an exec plugin run by theseus itself ([`crate::credential`]) and the context's
//! namespace. The retry every call goes through is in [`crate::retry`].
//!
//! kube's own retry layer is switched off on the clients built here: [`retry`] decides alone, so
//! attempts do not multiply and the count in a [`VolcanoError::Transport`] is the real one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use theseus_core::config::expand_tilde;

use crate::config::VolcanoHost;

use crate::error::{VolcanoError, config_error};
use crate::kubeconfig::{context_namespace, from_kubeconfig, merged, read};
use crate::proxy::ProxyEnv;
pub use crate::retry::{
    DEFAULT_API_TIMEOUT, REQUEST_TIMEOUT, RetryPolicy, Transient, retry, retry_counted, transport_detail,
};

/// Time allowed to open a TCP (and TLS) connection to the apiserver.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Parses a host's `api_timeout`: `30s`, `2m`, `1500ms` or plain seconds, from 1s to 1h.
///
/// # Errors
/// A message saying what is accepted.
pub fn parse_api_timeout(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    // The one duration parser of the project; the range is this key's own.
    let duration = theseus_core::duration::parse(text).map_err(|e| format!("{text:?}: {e}"))?;
    if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&duration) {
        return Err(format!("{text:?} is out of range; use 1s to 1h"));
    }
    Ok(duration)
}

/// The per-call deadline of `host` (its `api_timeout`, else [`DEFAULT_API_TIMEOUT`]).
///
/// # Errors
/// [`parse_api_timeout`]'s message, naming the key.
pub fn api_timeout(host: &VolcanoHost) -> Result<Duration, VolcanoError> {
    match &host.api_timeout {
        None => Ok(DEFAULT_API_TIMEOUT),
        Some(text) => parse_api_timeout(text).map_err(|e| VolcanoError::Config {
            source_name: "the dispatch config".into(),
            context: None,
            problem: format!("api_timeout: {e}"),
            fix: "fix the host's `api_timeout`".into(),
        }),
    }
}

/// Where a host's cluster credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeconfigSource {
    /// The host's `kubeconfig` setting (`~` expanded).
    Host(PathBuf),
    /// The `KUBECONFIG` environment variable: files merged in order.
    Env(Vec<PathBuf>),
    /// `~/.kube/config`.
    Default(PathBuf),
    /// The pod's service account (running inside the cluster, no kubeconfig file).
    InCluster,
}

impl KubeconfigSource {
    /// The files (or `in-cluster service account`) for messages.
    pub fn describe(&self) -> String {
        match self {
            KubeconfigSource::Host(p) | KubeconfigSource::Default(p) => p.display().to_string(),
            KubeconfigSource::Env(paths) => {
                let joined: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                format!("{} (from KUBECONFIG)", joined.join(":"))
            }
            KubeconfigSource::InCluster => "in-cluster service account".to_owned(),
        }
    }
}

/// What of the process environment decides the [`KubeconfigSource`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientEnv {
    /// `KUBECONFIG`.
    pub kubeconfig: Option<OsString>,
    /// The user's home directory.
    pub home: Option<PathBuf>,
    /// Whether `KUBERNETES_SERVICE_HOST` is set (we run in a pod).
    pub in_cluster: bool,
    /// Whether `~/.kube/config` exists.
    pub default_exists: bool,
    /// The proxy variables (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`, either case).
    pub proxy: ProxyEnv,
}

impl ClientEnv {
    /// Reads the environment of this process.
    pub fn from_process() -> ClientEnv {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let default_exists = home.as_deref().is_some_and(|h| default_path(h).is_file());
        ClientEnv {
            kubeconfig: std::env::var_os("KUBECONFIG"),
            home,
            in_cluster: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some_and(|v| !v.is_empty()),
            default_exists,
            proxy: ProxyEnv::from_process(),
        }
    }
}

/// Picks the kubeconfig of `host`: its `kubeconfig` setting, else `KUBECONFIG`, else
/// `~/.kube/config` when it exists, else the in-cluster service account when running in a pod.
///
/// # Errors
/// [`VolcanoError::Config`] when none of them is available, or `~` cannot be expanded.
pub fn resolve_source(host: &VolcanoHost, env: &ClientEnv) -> Result<KubeconfigSource, VolcanoError> {
    if let Some(path) = host.kubeconfig.as_deref().filter(|p| !p.is_empty()) {
        if path.starts_with('~') && env.home.is_none() {
            return Err(config_error(
                path,
                host.context.clone(),
                "`~` cannot be expanded: HOME is not set",
                "use an absolute path in the host's `kubeconfig`",
            ));
        }
        let home = env.home.clone().unwrap_or_default();
        return Ok(KubeconfigSource::Host(expand_tilde(path, &home)));
    }
    if let Some(value) = &env.kubeconfig {
        let paths: Vec<PathBuf> = std::env::split_paths(value).filter(|p| !p.as_os_str().is_empty()).collect();
        if !paths.is_empty() {
            return Ok(KubeconfigSource::Env(paths));
        }
    }
    if let Some(home) = &env.home
        && env.default_exists
    {
        return Ok(KubeconfigSource::Default(default_path(home)));
    }
    if env.in_cluster {
        return Ok(KubeconfigSource::InCluster);
    }
    let wanted =
        env.home.as_deref().map_or_else(|| "~/.kube/config".to_owned(), |h| default_path(h).display().to_string());
    Err(config_error(
        &wanted,
        host.context.clone(),
        "no such file, KUBECONFIG is not set and this is not a pod",
        "set `kubeconfig` on the host, export KUBECONFIG, or create ~/.kube/config (e.g. with your cloud's `get-credentials` command)",
    ))
}

/// The apiserver connection of one host, before any call is made.
#[derive(Clone)]
pub struct Connection {
    /// The client (kube retry off, connect timeout [`CONNECT_TIMEOUT`]).
    pub client: kube::Client,
    /// The apiserver URL, for messages.
    pub server: String,
    /// The context used (`None` in-cluster).
    pub context: Option<String>,
    /// The context's namespace (the service account's in-cluster), when it sets one.
    pub namespace: Option<String>,
    /// The proxy the client goes through, described for messages (never with credentials).
    pub proxy: Option<String>,
    /// The kubeconfig file(s), described for messages.
    pub source: String,
}

/// Builds the client of `host` from the environment of this process.
///
/// # Errors
/// [`VolcanoError::Config`] naming the file, the context and the fix.
pub async fn connect(host: &VolcanoHost) -> Result<Connection, VolcanoError> {
    connect_in(host, &ClientEnv::from_process()).await
}

/// [`connect`] in the environment `env`.
///
/// # Errors
/// [`VolcanoError::Config`] naming the file, the context and the fix.
pub async fn connect_in(host: &VolcanoHost, env: &ClientEnv) -> Result<Connection, VolcanoError> {
    let source = resolve_source(host, env)?;
    let deadline = api_timeout(host)?;
    connect_env(&source, host.context.as_deref(), deadline, &env.proxy).await
}

/// The namespace a host's jobs go to: its `namespace` key, else its kubeconfig context's
/// namespace, else `default` (kubectl's rule). Reads the kubeconfig (no network); an unreadable
/// one gives `default`, and the connection reports it.
pub fn effective_namespace(host: &VolcanoHost, env: &ClientEnv) -> String {
    if !host.namespace.is_empty() {
        return host.namespace.clone();
    }
    let from_context = || -> Option<String> {
        let kubeconfig = match resolve_source(host, env).ok()? {
            KubeconfigSource::Host(path) | KubeconfigSource::Default(path) => read(&path, None).ok()?,
            KubeconfigSource::Env(paths) => merged(&paths, None, "").ok()?,
            KubeconfigSource::InCluster => {
                return std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .ok()
                    .map(|n| n.trim().to_owned());
            }
        };
        let chosen = host.context.clone().or_else(|| kubeconfig.current_context.clone())?;
        context_namespace(&kubeconfig, &chosen)
    };
    from_context().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".to_owned())
}

/// Builds a client from `source`, selecting `context` (else the current context).
///
/// # Errors
/// [`VolcanoError::Config`] naming the file, the context and the fix.
pub async fn connect_with(source: &KubeconfigSource, context: Option<&str>) -> Result<Connection, VolcanoError> {
    connect_within(source, context, DEFAULT_API_TIMEOUT).await
}

/// [`connect_with`], connecting within at most `deadline` (and [`CONNECT_TIMEOUT`]).
///
/// # Errors
/// [`VolcanoError::Config`] naming the file, the context and the fix.
pub async fn connect_within(
    source: &KubeconfigSource,
    context: Option<&str>,
    deadline: Duration,
) -> Result<Connection, VolcanoError> {
    connect_env(source, context, deadline, &ProxyEnv::from_process()).await
}

/// [`connect_within`] with the proxy variables `proxy_env`.
///
/// # Errors
/// [`VolcanoError::Config`] naming the file, the context and the fix;
/// [`VolcanoError::Credential`] when the user's exec plugin fails.
pub async fn connect_env(
    source: &KubeconfigSource,
    context: Option<&str>,
    deadline: Duration,
    proxy_env: &ProxyEnv,
) -> Result<Connection, VolcanoError> {
    let described = source.describe();
    let (mut config, context, namespace, proxy_url) = match source {
        KubeconfigSource::InCluster => {
            if let Some(c) = context {
                tracing::warn!(context = c, "running in a pod without a kubeconfig: ignoring the host's context");
            }
            let config = kube::Config::incluster().map_err(|e| {
                config_error(
                    &described,
                    None,
                    &e.to_string(),
                    "mount the service account token or give the host a `kubeconfig`",
                )
            })?;
            let namespace = Some(config.default_namespace.clone());
            (config, None, namespace, None)
        }
        KubeconfigSource::Host(path) | KubeconfigSource::Default(path) => {
            let kubeconfig = read(path, context)?;
            from_kubeconfig(kubeconfig, &described, context).await?
        }
        KubeconfigSource::Env(paths) => {
            let merged = merged(paths, context, &described)?;
            from_kubeconfig(merged, &described, context).await?
        }
    };
    config.connect_timeout = Some(CONNECT_TIMEOUT.min(deadline));
    config.default_retry = false;
    let server = config.cluster_url.to_string();
    // kube-rs's own proxy choice matches NO_PROXY against the proxy, not the server: ours is
    // kubectl's.
    let proxy = crate::proxy::choose(&config.cluster_url, proxy_url.as_deref(), proxy_env).map_err(|problem| {
        config_error(
            &described,
            context.clone(),
            &problem,
            "fix the cluster's proxy-url or the proxy variable (or exempt the server with NO_PROXY)",
        )
    })?;
    if let Some(p) = &proxy {
        tracing::debug!(proxy = %p.describe(), server = %server, "connecting through a proxy");
    }
    config.proxy_url = proxy.as_ref().map(|p| p.url.clone());
    // kube-rs runs an exec plugin each time it builds a client's auth (three times per client),
    // and words its failure with the plugin's env: theseus runs it once and hands over the token.
    // The plugin runs here first, so that a broken one is reported before any call; a token is
    // then put on each request by the layer, which fetches a new one when it expires.
    let mut token_layer = None;
    if let Some(exec) = config.auth_info.exec.take() {
        let credential = crate::credential::credential(&exec, &server).await.map_err(|message| {
            VolcanoError::Credential { source_name: described.clone(), context: context.clone(), message }
        })?;
        if let Some((cert, key)) = credential.client_cert {
            config.auth_info.client_certificate_data = Some(theseus_core::encoding::base64(cert.as_bytes()));
            config.auth_info.client_key_data = Some(theseus_core::encoding::base64(key.as_bytes()).into());
        } else {
            token_layer = Some(crate::credential::ExecAuthLayer::new(exec, &server));
        }
    }
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| {
        config_error(
            &described,
            context.clone(),
            &format!("cannot build a client: {e}"),
            "check the cluster's certificate-authority data and the user's credentials",
        )
    })?;
    let client = match token_layer {
        Some(layer) => builder.with_layer(&layer).build(),
        None => builder.build(),
    };
    Ok(Connection { client, server, context, namespace, proxy: proxy.map(|p| p.describe()), source: described })
}

/// A client for a plain-HTTP apiserver at `url` (tests, the simulator), with the same settings
/// as [`connect`].
///
/// # Errors
/// [`VolcanoError::Config`] when `url` is not a URL.
pub fn client_for_url(url: &str) -> Result<kube::Client, VolcanoError> {
    let uri = url.parse().map_err(|e: http::uri::InvalidUri| {
        config_error(url, None, &format!("not a URL: {e}"), "pass the apiserver's URL")
    })?;
    let mut config = kube::Config::new(uri);
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.default_retry = false;
    kube::Client::try_from(config)
        .map_err(|e| config_error(url, None, &format!("cannot build a client: {e}"), "pass the apiserver's URL"))
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("server", &self.server)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

fn default_path(home: &Path) -> PathBuf {
    home.join(".kube").join("config")
}

#[cfg(test)]
mod tests {
    use theseus_core::files::KUBECONFIG_LIMIT;

    use super::*;

    fn host(kubeconfig: Option<&str>, context: Option<&str>) -> VolcanoHost {
        let mut body = serde_json::json!({"cluster": "k8s"});
        if let Some(k) = kubeconfig {
            body["kubeconfig"] = k.into();
        }
        if let Some(c) = context {
            body["context"] = c.into();
        }
        serde_json::from_value(body).expect("a volcano host")
    }

    fn env(kubeconfig: Option<&str>, default_exists: bool, in_cluster: bool) -> ClientEnv {
        ClientEnv {
            kubeconfig: kubeconfig.map(OsString::from),
            home: Some(PathBuf::from("/home/u")),
            in_cluster,
            default_exists,
            proxy: ProxyEnv::default(),
        }
    }

    #[test]
    fn source_precedence_is_host_then_env_then_default_then_in_cluster() {
        assert_eq!(
            resolve_source(&host(Some("~/k/prod.yaml"), None), &env(Some("/a:/b"), true, true)).unwrap(),
            KubeconfigSource::Host(PathBuf::from("/home/u/k/prod.yaml"))
        );
        assert_eq!(
            resolve_source(&host(None, None), &env(Some("/a::/b"), true, true)).unwrap(),
            KubeconfigSource::Env(vec![PathBuf::from("/a"), PathBuf::from("/b")])
        );
        assert_eq!(
            resolve_source(&host(None, None), &env(Some(""), true, true)).unwrap(),
            KubeconfigSource::Default(PathBuf::from("/home/u/.kube/config"))
        );
        assert_eq!(resolve_source(&host(None, None), &env(None, false, true)).unwrap(), KubeconfigSource::InCluster);
    }

    #[test]
    fn nothing_to_use_names_the_file_and_the_fix() {
        let err = resolve_source(&host(None, Some("prod")), &env(None, false, false)).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("kubeconfig /home/u/.kube/config (context \"prod\"): no such file"), "{text}");
        assert!(text.contains("export KUBECONFIG"), "{text}");
    }

    #[tokio::test]
    async fn unknown_context_lists_the_available_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:1'}\n\
             users:\n- name: u\n  user: {}\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\n- name: b\n  context: {cluster: c, user: u}\n",
        )
        .unwrap();
        let source = KubeconfigSource::Host(path.clone());
        let err = connect_with(&source, Some("prod")).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("no such context") && text.contains("one of: a, b"), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");

        let ok = connect_with(&source, None).await.unwrap();
        assert_eq!(ok.context.as_deref(), Some("a"));
        assert_eq!(ok.server, "http://127.0.0.1:1/");
        let ok = connect_with(&source, Some("b")).await.unwrap();
        assert_eq!(ok.context.as_deref(), Some("b"));
    }

    #[test]
    fn api_timeouts_parse_with_units_and_bounds() {
        assert_eq!(parse_api_timeout("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_api_timeout("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_api_timeout("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_api_timeout("45"), Ok(Duration::from_secs(45)));
        for bad in ["0s", "inf", "NaN", "-5s", "1e30", "2h", "5 parsecs", ""] {
            assert!(parse_api_timeout(bad).is_err(), "{bad}");
        }
        let mut h = host(None, None);
        assert_eq!(api_timeout(&h).unwrap(), DEFAULT_API_TIMEOUT);
        h.api_timeout = Some("soon".into());
        assert!(api_timeout(&h).unwrap_err().to_string().contains("api_timeout"));
    }

    #[tokio::test]
    async fn a_broken_kubeconfig_is_located_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, "apiVersion: v1\nusers:\n- name: u\n  user: {token: SECRETTOKEN123, x: [}\n").unwrap();
        let text = connect_with(&KubeconfigSource::Host(path.clone()), None).await.unwrap_err().to_string();
        assert!(text.starts_with(&format!("kubeconfig {}: invalid YAML: line 4 column ", path.display())), "{text}");
        assert!(!text.contains("SECRETTOKEN123"), "{text}");

        std::fs::write(&path, "apiVersion: v1\nusers: SECRETTOKEN123\n").unwrap();
        let text = connect_with(&KubeconfigSource::Host(path.clone()), None).await.unwrap_err().to_string();
        assert!(!text.contains("SECRETTOKEN123"), "{text}");
    }

    #[tokio::test]
    async fn only_small_regular_files_are_read() {
        let text =
            connect_with(&KubeconfigSource::Env(vec![PathBuf::from("/dev/zero")]), None).await.unwrap_err().to_string();
        assert!(text.contains("/dev/zero") && text.contains("not a regular file (a character device)"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'#'; (KUBECONFIG_LIMIT + 1) as usize]).unwrap();
        let text = connect_with(&KubeconfigSource::Host(big), None).await.unwrap_err().to_string();
        assert!(text.contains("larger than the limit of 16 MiB"), "{text}");
    }

    #[test]
    fn a_host_without_namespace_takes_its_contexts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".kube")).unwrap();
        std::fs::write(
            dir.path().join(".kube/config"),
            "apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:1'}\n\
             users:\n- name: u\n  user: {}\ncontexts:\n- name: a\n  context: {cluster: c, user: u, namespace: team-a}\n\
             - name: b\n  context: {cluster: c, user: u}\n",
        )
        .unwrap();
        let env = ClientEnv { home: Some(dir.path().to_owned()), default_exists: true, ..ClientEnv::default() };
        let mut h = host(None, None);
        h.namespace.clear();
        assert_eq!(effective_namespace(&h, &env), "team-a");
        h.context = Some("b".into());
        assert_eq!(effective_namespace(&h, &env), "default");
        h.namespace = "ml".into();
        assert_eq!(effective_namespace(&h, &env), "ml");
    }

    #[tokio::test]
    async fn missing_file_says_so() {
        let err = connect_with(&KubeconfigSource::Host(PathBuf::from("/nonexistent/kc")), None).await.unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("kubeconfig /nonexistent/kc:") && text.contains("check the path"), "{text}");
    }
}

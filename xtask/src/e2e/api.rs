//! Access to the cluster under test for the checks and set-ups the scenarios make (as an
//! admin, never as theseus's user): HTTPS to the simulator (rustls, trusting the simulator's CA;
//! no client library needed), or `kubectl` on a real cluster.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tokio_rustls::rustls;

/// How the checks reach the API server.
pub(crate) enum Api {
    /// The simulator at `https://127.0.0.1:PORT` whose CA is `ca_pem`, with the bearer token
    /// of an admin when it runs with RBAC.
    Sim { addr: String, ca_pem: String, token: Option<String> },
    /// A real cluster, through `kubectl --kubeconfig`.
    Kubectl { kubeconfig: PathBuf },
}

impl Api {
    /// `GET path` (with query), parsed as JSON.
    pub(crate) fn get(&self, path: &str) -> Result<Value> {
        let body = match self {
            Api::Sim { addr, ca_pem, token } => https(addr, ca_pem, "GET", path, token.as_deref(), None)?,
            Api::Kubectl { kubeconfig } => {
                let out = Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(kubeconfig)
                    .args(["get", "--raw", path])
                    .output()
                    .context("cannot run kubectl")?;
                if !out.status.success() {
                    bail!("kubectl get --raw {path} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
                }
                out.stdout
            }
        };
        serde_json::from_slice(&body).with_context(|| format!("GET {path} did not return JSON"))
    }

    /// Creates a Queue `name` (weight 1, no capability).
    pub(crate) fn create_queue(&self, name: &str) -> Result<()> {
        let path = "/apis/scheduling.volcano.sh/v1beta1/queues";
        let body = serde_json::json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name}, "spec": {"weight": 1, "reclaimable": true},
        });
        self.write("POST", path, Some(&body), &["create", "--raw", path, "-f", "-"])
    }

    /// Closes the Queue `name` as Volcano closes one: a `bus.volcano.sh` Command with action
    /// `CloseQueue` targeting it (what `vcctl queue operate --action close` creates); the queue
    /// controller then sets `status.state` (`Closing` while PodGroups remain, then `Closed`).
    pub(crate) fn close_queue(&self, name: &str) -> Result<()> {
        let queue = self.get(&format!("/apis/scheduling.volcano.sh/v1beta1/queues/{name}"))?;
        let uid = queue["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let path = "/apis/bus.volcano.sh/v1alpha1/namespaces/default/commands";
        let body = serde_json::json!({
            "apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
            "metadata": {"generateName": format!("{name}-close-")},
            "action": "CloseQueue",
            "target": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "name": name, "uid": uid},
        });
        self.write("POST", path, Some(&body), &["create", "--raw", path, "-f", "-"])
    }

    /// Creates `body` at the collection `path`; an object of that name that exists already is
    /// left as it is (the shared-cluster set-up runs before each of its scenarios).
    pub(crate) fn create_if_absent(&self, path: &str, body: &Value) -> Result<()> {
        match self.write("POST", path, Some(body), &["create", "--raw", path, "-f", "-"]) {
            Err(e) if format!("{e:#}").contains("409") || format!("{e:#}").contains("AlreadyExists") => Ok(()),
            other => other,
        }
    }

    /// Deletes the object at `path` (a pod, a queue).
    pub(crate) fn delete(&self, path: &str) -> Result<()> {
        self.write("DELETE", path, None, &["delete", "--raw", path])
    }

    /// A write: HTTP `method` to the simulator, or `kubectl ARGS` (the body on stdin).
    fn write(&self, method: &str, path: &str, body: Option<&Value>, kubectl: &[&str]) -> Result<()> {
        match self {
            Api::Sim { addr, ca_pem, token } => {
                https(addr, ca_pem, method, path, token.as_deref(), body.map(Value::to_string).as_deref())?;
            }
            Api::Kubectl { kubeconfig } => {
                use std::io::Write as _;
                let mut child = Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(kubeconfig)
                    .args(kubectl)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .context("cannot run kubectl")?;
                if let (Some(body), Some(mut stdin)) = (body, child.stdin.take()) {
                    stdin.write_all(body.to_string().as_bytes())?;
                }
                let out = child.wait_with_output()?;
                if !out.status.success() {
                    bail!("kubectl {} failed: {}", kubectl.join(" "), String::from_utf8_lossy(&out.stderr).trim());
                }
            }
        }
        Ok(())
    }

    /// The `items` of a list at `path`.
    pub(crate) fn list(&self, path: &str) -> Result<Vec<Value>> {
        let list = self.get(path)?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }
}

/// The names of listed objects.
pub(crate) fn names(items: &[Value]) -> Vec<String> {
    items.iter().filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned)).collect()
}

/// A TLS client that trusts only `ca_pem`.
fn tls_client(ca_pem: &str) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.context("the simulator's CA is not PEM")?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// HTTP/1.1 over TLS on loopback (a JSON body, a merge patch for `PATCH`); handles
/// `Content-Length` and chunked bodies; anything but 2xx is an error.
fn https(
    addr: &str,
    ca_pem: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Result<Vec<u8>> {
    let (status, body) = https_status(addr, ca_pem, method, path, token, body)?;
    if !(200..300).contains(&status) {
        bail!("{method} {path}: HTTP {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(body)
}

/// One HTTPS request to `addr` trusting `ca_pem`: the status and the (de-chunked) body,
/// whatever the status.
pub(crate) fn https_status(
    addr: &str,
    ca_pem: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Result<(u16, Vec<u8>)> {
    let tcp = TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host).to_owned();
    let name = rustls::pki_types::ServerName::try_from(host)?;
    let conn = rustls::ClientConnection::new(tls_client(ca_pem)?, name)?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let content_type = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Accept: application/json\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = Vec::new();
    match stream.read_to_end(&mut response) {
        Ok(_) => {}
        // The server closed after the body without a TLS close_notify (Connection: close).
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {}
        Err(e) => return Err(e).with_context(|| format!("{method} {path}: reading the response")),
    }
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").context("no end of the response head")?;
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    let body = &response[split + 4..];
    let status = head.split_whitespace().nth(1).unwrap_or("");
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked { dechunk(body)? } else { body.to_vec() };
    let status = status.parse().with_context(|| format!("{method} {path}: bad status line `{head}`"))?;
    Ok((status, body))
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = body.windows(2).position(|w| w == b"\r\n").context("bad chunk header")?;
        let size_text = String::from_utf8_lossy(&body[..eol]).to_string();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("bad chunk size `{size_text}`"))?;
        body = &body[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if body.len() < size + 2 {
            bail!("truncated chunk");
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dechunks_a_body() {
        let body = b"4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n";
        assert_eq!(super::dechunk(body).unwrap(), b"{\"a\":1}");
    }
}

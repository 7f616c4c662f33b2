//! What the real-site tests share: certificates made with the `openssl` command, a real TLS
//! server (`openssl s_server`) on loopback, kubeconfig files, and processes that end with the
//! test (killed by their own PID).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (by its PID) when dropped.
pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free port on 127.0.0.1 (bound then released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until `addr` accepts connections (a bound for the test, not a timing assertion).
pub(crate) fn wait_listening(addr: &str, what: &str) {
    let started = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what} does not listen on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("the openssl command");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA `NAME.crt`/`NAME.key` in `dir`.
pub(crate) fn make_ca(dir: &Path, name: &str) -> PathBuf {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-subj",
            &format!("/CN={name}"),
            "-days",
            "2",
        ],
    );
    dir.join(format!("{name}.crt"))
}

/// A server certificate `NAME.crt`/`NAME.key` signed by `ca`, with `san` (e.g.
/// `IP:127.0.0.1`), valid for `days` (negative: already expired).
pub(crate) fn make_cert(dir: &Path, ca: &str, name: &str, san: &str, days: i32) -> (PathBuf, PathBuf) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    std::fs::write(dir.join(format!("{name}.ext")), format!("subjectAltName={san}\n")).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            &days.to_string(),
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
    (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")))
}

/// A real TLS server on 127.0.0.1 presenting `cert`; its `https://` URL.
pub(crate) fn tls_server(cert: &Path, key: &Path) -> (String, Running) {
    let port = free_port();
    let child = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-cert")
        .arg(cert)
        .arg("-key")
        .arg(key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let running = Running(child);
    wait_listening(&format!("127.0.0.1:{port}"), "openssl s_server");
    (format!("https://127.0.0.1:{port}"), running)
}

/// A kubeconfig at `path` with one context `ctx` on `server`; `cluster_extra` and `user` are
/// YAML flow-mapping entries (e.g. `certificate-authority: /ca.crt`), `namespace` the context's.
pub(crate) fn write_kubeconfig(path: &Path, server: &str, cluster_extra: &str, user: &str, namespace: Option<&str>) {
    let ns = namespace.map(|n| format!(", namespace: {n}")).unwrap_or_default();
    let extra = if cluster_extra.is_empty() { String::new() } else { format!(", {cluster_extra}") };
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: ctx\nclusters:\n- name: c\n  cluster: {{server: '{server}'{extra}}}\n\
             users:\n- name: u\n  user: {{{user}}}\ncontexts:\n- name: ctx\n  context: {{cluster: c, user: u{ns}}}\n"
        ),
    )
    .unwrap();
}

/// A volcano host reading `kubeconfig`, with `extra` keys.
pub(crate) fn host_with(kubeconfig: &Path, extra: serde_json::Value) -> theseus_backend_volcano::VolcanoHost {
    let mut body = serde_json::json!({"cluster": "k8s", "queue": "q", "image": "img", "pvc_name": "pvc",
        "kubeconfig": kubeconfig.display().to_string()});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        body[k] = v;
    }
    serde_json::from_value(body).expect("a volcano host")
}

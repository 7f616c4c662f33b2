//! What crosses the [`crate::backend::Backend`] trait for `theseus shell`: the request (rank,
//! command, terminal) and how the backend answers it, either a program of this machine to run
//! on the user's terminal (`ssh -t`, `ssh … srun --pty`, a local `sh`) or a process attached
//! through the backend's own API (a Kubernetes exec), whose streams the CLI pumps.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// A terminal's size in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// What `theseus shell` asks of a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellRequest {
    /// The rank whose node, pod or process environment the shell enters.
    pub rank: u32,
    /// The command to run; empty for an interactive shell.
    pub command: Vec<String>,
    /// A terminal of this size for the remote process (`None`: plain pipes, e.g. for a command
    /// whose output a script reads).
    pub tty: Option<TtySize>,
}

/// How a backend runs a [`ShellRequest`].
pub enum ShellSession {
    /// Run this program here with the user's stdin, stdout and stderr; its exit code is the
    /// remote command's.
    Program(ShellProgram),
    /// A remote process attached through the backend.
    Attached(AttachedShell),
}

/// A program of this machine (see [`ShellSession::Program`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellProgram {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to its environment.
    pub env: Vec<(String, String)>,
    /// Its working dir.
    pub cwd: Option<PathBuf>,
}

/// A remote process attached through the backend (see [`ShellSession::Attached`]).
pub struct AttachedShell {
    /// Its stdin; dropping it closes the remote stdin.
    pub stdin: Pin<Box<dyn AsyncWrite + Send>>,
    /// Its stdout (with a TTY, stdout and stderr together).
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    /// Its stderr, without a TTY.
    pub stderr: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// Where new terminal sizes go, with a TTY.
    pub resize: Option<tokio::sync::mpsc::Sender<TtySize>>,
    /// Resolves to the exit code once the process ended.
    pub exit: Pin<Box<dyn Future<Output = crate::Result<i32>> + Send>>,
}

impl std::fmt::Debug for ShellSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShellSession::Program(p) => f.debug_tuple("Program").field(p).finish(),
            ShellSession::Attached(a) => {
                f.debug_struct("Attached").field("tty", &a.resize.is_some()).finish_non_exhaustive()
            }
        }
    }
}

/// Where a Jupyter server said it listens: its port, token and path, from its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JupyterUrl {
    /// The port it listens on (on the rank's host, node or pod).
    pub port: u16,
    /// The access token (empty when the server has none).
    pub token: String,
}

impl JupyterUrl {
    /// The URL through a local port.
    pub fn local(&self, port: u16) -> String {
        if self.token.is_empty() {
            format!("http://127.0.0.1:{port}/lab")
        } else {
            format!("http://127.0.0.1:{port}/lab?token={}", self.token)
        }
    }
}

/// The first Jupyter Lab URL in log lines (`http://HOST:PORT/lab?token=T`, as Jupyter Server
/// prints when it is ready), preferring one with a token. Pure.
pub fn jupyter_url<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<JupyterUrl> {
    let mut without_token = None;
    for line in lines {
        for (at, _) in line.match_indices("http://") {
            let url = line[at + "http://".len()..].split_whitespace().next().unwrap_or("");
            let Some((authority, rest)) = url.split_once('/') else { continue };
            if !rest.starts_with("lab") {
                continue;
            }
            let Some(port) = authority.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()) else { continue };
            let token = rest
                .split_once('?')
                .map(|(_, query)| query)
                .into_iter()
                .flat_map(|q| q.split('&'))
                .find_map(|kv| kv.strip_prefix("token="))
                .unwrap_or("")
                .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_owned();
            let found = JupyterUrl { port, token };
            if !found.token.is_empty() {
                return Some(found);
            }
            without_token.get_or_insert(found);
        }
    }
    without_token
}

/// The entrypoint of a `theseus repl` session: Jupyter Lab (port 8888, or the next free one)
/// on 127.0.0.1, which a tunnel reaches on the host or through the pod's port-forward, or on the
/// address `THESEUS_BIND_ADDRESS` names (a host type whose ranks' ports are reached from another
/// machine sets it in its rank wiring), from the project's `.venv` when it has Jupyter, else `$THESEUS_PYTHON` (default
/// `python3`), else added by `uv run --with jupyterlab`; with none of those it exits 127 saying
/// what is missing. Jupyter's runtime files go under `.theseus/jupyter` when
/// `JUPYTER_RUNTIME_DIR` is unset (a pod may have no writable home).
pub fn jupyter_entrypoint() -> Vec<String> {
    const SCRIPT: &str = r#"ip=${THESEUS_BIND_ADDRESS:-127.0.0.1}
export JUPYTER_RUNTIME_DIR="${JUPYTER_RUNTIME_DIR:-$PWD/.theseus/jupyter}"
set -- --no-browser --ip "$ip" --port 8888 --ServerApp.port_retries=50 --ServerApp.root_dir="$PWD"
# Containers often run as root, which Jupyter refuses unless told.
if [ "$(id -u 2>/dev/null)" = 0 ]; then set -- "$@" --allow-root; fi
if [ -x .venv/bin/python ] && .venv/bin/python -c 'import jupyterlab' 2>/dev/null; then
  exec .venv/bin/python -m jupyterlab "$@"
fi
py=${THESEUS_PYTHON:-python3}
if "$py" -c 'import jupyterlab' 2>/dev/null; then
  exec "$py" -m jupyterlab "$@"
fi
if command -v uv >/dev/null 2>&1; then
  echo "[theseus] Jupyter Lab is not installed here; adding it with uv run --with jupyterlab" >&2
  exec uv run --with jupyterlab jupyter lab "$@"
fi
echo "[theseus] error: no Jupyter Lab here: $py has no jupyterlab module and uv is not on PATH to add it; install jupyterlab into the image or the project (e.g. a uv group)" >&2
exit 127
"#;
    ["sh", "-c", SCRIPT].map(str::to_owned).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jupyter_urls_from_its_log() {
        let log = [
            "[I 2026-11-25 05:00:00.000 ServerApp] Jupyter Server 2.17.0 is running at:",
            "[I 2026-11-25 05:00:00.000 ServerApp] http://node-7:8890/lab?token=0a1b2c3d",
            "[I 2026-11-25 05:00:00.000 ServerApp]     http://127.0.0.1:8890/lab?token=0a1b2c3d",
        ];
        assert_eq!(jupyter_url(log), Some(JupyterUrl { port: 8890, token: "0a1b2c3d".into() }));
        assert_eq!(
            jupyter_url(["see http://localhost:8888/tree", "at http://h:9/lab"]),
            Some(JupyterUrl { port: 9, token: String::new() })
        );
        assert_eq!(jupyter_url(["no url", "http://h/lab", "http://h:x/lab?token=1"]), None);
        assert_eq!(JupyterUrl { port: 1, token: "t".into() }.local(5), "http://127.0.0.1:5/lab?token=t");
    }

    #[test]
    fn the_entrypoint_says_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let words = jupyter_entrypoint();
        assert_eq!(words[0], "sh");
        let out = std::process::Command::new("/bin/sh")
            .args(&words[1..])
            .current_dir(dir.path())
            .env("THESEUS_PYTHON", "/nonexistent/python")
            .env("PATH", "/nonexistent")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(127));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no Jupyter Lab here") && err.contains("/nonexistent/python"), "{err}");
    }

    #[test]
    fn jupyter_listens_on_loopback_unless_the_rank_wiring_names_an_address() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        // A python whose jupyterlab prints the arguments it was given.
        let python = dir.path().join("python");
        std::fs::write(&python, "#!/bin/sh\n[ \"$1\" = -c ] && exit 0\nshift 2\necho \"$@\"\n").unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ip_of = |bind: Option<&str>| {
            let words = jupyter_entrypoint();
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.args(&words[1..])
                .current_dir(dir.path())
                .env("THESEUS_PYTHON", &python)
                .env_remove("THESEUS_BIND_ADDRESS");
            if let Some(bind) = bind {
                cmd.env("THESEUS_BIND_ADDRESS", bind);
            }
            let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
            out.split_whitespace().skip_while(|w| *w != "--ip").nth(1).map(str::to_owned)
        };
        assert_eq!(ip_of(None).as_deref(), Some("127.0.0.1"));
        assert_eq!(ip_of(Some("0.0.0.0")).as_deref(), Some("0.0.0.0"));
    }
}

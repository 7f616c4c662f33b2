//! Exec protocol tests: v4 and v5 channels against a real process, driven through kube-rs
//! `Api::<Pod>::exec`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{AttachParams, AttachedProcess};
use kube::{Api, Client};
use theseus_kube_sim::exec::{ExecServer, ExecServerOptions, Protocols};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOTH: [Protocols; 2] = [Protocols::V5AndV4, Protocols::V4Only];
const LIMIT: Duration = Duration::from_secs(30);

struct Fixture {
    _root: tempfile::TempDir,
    _server: ExecServer,
    pods: Api<Pod>,
}

async fn fixture(options: ExecServerOptions) -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let server = ExecServer::start(root.path(), options).await.unwrap();
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.root_cert = Some(vec![server.ca_der()]);
    let client = Client::try_from(config).unwrap();
    Fixture { _root: root, _server: server, pods: Api::namespaced(client, "default") }
}

async fn fixture_with(protocols: Protocols) -> Fixture {
    fixture(ExecServerOptions { protocols, ..ExecServerOptions::default() }).await
}

/// Takes the status (`None`: the connection ended without one) and the output that arrived.
///
/// kube-rs ends stdout/stderr only when its session ends cleanly; after a broken connection they
/// never reach EOF, so the output is read only until shortly after the status resolves.
async fn finish(mut proc: AttachedProcess) -> (String, String, Option<Status>) {
    let status = proc.take_status().unwrap();
    let (stdout, stderr) = (proc.stdout(), proc.stderr());
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let run = async {
        let mut readers = std::pin::pin!(futures::future::join(read_all(stdout, &mut out), read_all(stderr, &mut err)));
        let mut status = std::pin::pin!(status);
        tokio::select! {
            status = &mut status => {
                let _ = tokio::time::timeout(Duration::from_secs(2), readers).await;
                status
            }
            _ = &mut readers => status.await,
        }
    };
    let status = tokio::time::timeout(LIMIT, run).await.expect("exec session hung");
    (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap(), status)
}

async fn read_all(reader: Option<impl tokio::io::AsyncRead + Unpin>, buf: &mut Vec<u8>) {
    if let Some(mut reader) = reader {
        let mut chunk = [0u8; 8192];
        loop {
            match reader.read(&mut chunk).await.unwrap() {
                0 => return,
                n => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

fn exit_code(status: &Status) -> Option<String> {
    let causes = status.details.as_ref()?.causes.as_ref()?;
    causes.iter().find(|c| c.reason.as_deref() == Some("ExitCode"))?.message.clone()
}

#[tokio::test]
async fn echo_runs_in_root_on_both_protocols() {
    for protocols in BOTH {
        let fx = fixture_with(protocols).await;
        let cmd = vec!["sh", "-c", "echo hello \"$1\"; pwd", "sh", "wörld with space"];
        let proc = fx.pods.exec("any-pod", cmd, &AttachParams::default()).await.unwrap();
        let (out, err, status) = finish(proc).await;
        let root = fx._root.path().canonicalize().unwrap();
        assert_eq!(out, format!("hello wörld with space\n{}\n", root.display()), "{protocols:?}");
        assert_eq!(err, "");
        assert_eq!(status.unwrap().status.as_deref(), Some("Success"), "{protocols:?}");
    }
}

#[tokio::test]
async fn non_zero_exit_code_surfaces_in_status() {
    for protocols in BOTH {
        let fx = fixture_with(protocols).await;
        let cmd = vec!["sh", "-c", "echo oops >&2; exit 3"];
        let proc = fx.pods.exec("p", cmd, &AttachParams::default()).await.unwrap();
        let (out, err, status) = finish(proc).await;
        let status = status.expect("a status");
        assert_eq!(out, "");
        assert_eq!(err, "oops\n");
        assert_eq!(status.status.as_deref(), Some("Failure"));
        assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
        assert_eq!(exit_code(&status).as_deref(), Some("3"), "{protocols:?}");
        assert!(status.message.unwrap().contains("exit code 3"));
    }
}

#[tokio::test]
async fn missing_program_is_a_failure_status() {
    let fx = fixture_with(Protocols::V5AndV4).await;
    let proc = fx.pods.exec("p", vec!["/no/such/program"], &AttachParams::default()).await.unwrap();
    let (_, _, status) = finish(proc).await;
    let status = status.expect("a status");
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert!(status.message.unwrap().contains("/no/such/program"));
}

#[tokio::test]
async fn bad_requests_are_api_errors() {
    let fx = fixture_with(Protocols::V5AndV4).await;
    let ap = AttachParams::default().stdout(true);
    let err = fx.pods.exec("p", Vec::<String>::new(), &ap).await.err().expect("an exec without a command is refused");
    match err {
        kube::Error::Api(status) => assert_eq!(status.code, 400),
        other => panic!("expected an API error, got {other:?}"),
    }
    let err = fx.pods.get("p").await.expect_err("only exec is served");
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404), "{err:?}");
}

/// On v5, closing stdin sends `[255, 0]`: `cat` sees EOF, exits, and the status arrives.
#[tokio::test]
async fn stdin_round_trip_and_close_on_v5() {
    let fx = fixture_with(Protocols::V5AndV4).await;
    let ap = AttachParams::default().stdin(true).max_stdin_buf_size(64 * 1024);
    let mut proc = fx.pods.exec("p", vec!["cat"], &ap).await.unwrap();
    let mut stdin = proc.stdin().unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut stdout = proc.stdout().unwrap();
    let status = proc.take_status().unwrap();
    let writer = async {
        stdin.write_all(&data).await.unwrap();
        stdin.shutdown().await.unwrap();
        drop(stdin);
    };
    let mut echoed = Vec::new();
    let (_, read, status) =
        tokio::time::timeout(LIMIT, async { tokio::join!(writer, stdout.read_to_end(&mut echoed), status) })
            .await
            .expect("cat hung: stdin close not delivered");
    read.unwrap();
    assert_eq!(echoed.len(), data.len());
    assert!(echoed == data);
    assert_eq!(status.unwrap().status.as_deref(), Some("Success"));
}

/// On v4 there is no stdin close: a reader that knows the length (`head -c`) finishes while
/// stdin stays open; closing stdin instead closes the websocket and ends the session unfinished.
#[tokio::test]
async fn stdin_on_v4_needs_a_length_and_close_ends_the_session() {
    let fx = fixture_with(Protocols::V4Only).await;
    let ap = AttachParams::default().stdin(true);
    let data = b"line one\nline two\n".repeat(1000);
    let len = data.len().to_string();
    let mut proc = fx.pods.exec("p", vec!["head", "-c", &len], &ap).await.unwrap();
    let mut stdin = proc.stdin().unwrap();
    stdin.write_all(&data).await.unwrap();
    let (out, _, status) = finish(proc).await;
    assert_eq!(out.as_bytes(), &data[..]);
    assert_eq!(status.unwrap().status.as_deref(), Some("Success"));
    drop(stdin);

    // `cat` never ends on v4: dropping stdin closes the connection, no status comes back.
    let mut proc = fx.pods.exec("p", vec!["cat"], &ap).await.unwrap();
    let mut stdin = proc.stdin().unwrap();
    stdin.write_all(b"lost\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    let (_, _, status) = finish(proc).await;
    assert!(status.is_none(), "v4 cannot deliver a status after stdin closes: {status:?}");
}

/// A dropped connection kills the process group: a background child of the command never gets
/// to write its marker file.
#[tokio::test]
async fn dropped_connection_kills_the_process_group() {
    for protocols in BOTH {
        let fx =
            fixture(ExecServerOptions { protocols, drop_after_stdin_bytes: Some(10), ..ExecServerOptions::default() })
                .await;
        let ap = AttachParams::default().stdin(true);
        let script = "(sleep 2; touch late-marker) & echo ready; head -c 10 > got; sleep 30";
        let mut proc = fx.pods.exec("p", vec!["sh", "-c", script], &ap).await.unwrap();
        let mut stdin = proc.stdin().unwrap();
        let mut ready = [0u8; 6];
        proc.stdout().unwrap().read_exact(&mut ready).await.unwrap();
        assert_eq!(&ready, b"ready\n");
        // Writes may fail once the connection is gone; that is the point.
        let _ = stdin.write_all(&[b'x'; 100]).await;
        let (_, _, status) = finish(proc).await;
        assert!(status.is_none(), "{protocols:?}: {status:?}");
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let root = fx._root.path();
        assert!(!root.join("late-marker").exists(), "{protocols:?}: the process group survived");
    }
}

/// A free port on loopback (closed again; the pod's server takes it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn portforward_reaches_a_server_in_the_pod_and_reports_a_closed_port() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let ctx = crate::support::start(theseus_kube_sim::SimConfig {
        nodes: vec![theseus_kube_sim::NodeConfig::new("n", 0)],
        ..theseus_kube_sim::SimConfig::default()
    })
    .await;
    let port = free_port();
    let jobs = crate::support::vcjobs(&ctx.client, "default");
    let serve = format!(
        "import http.server as h; h.HTTPServer(('127.0.0.1', {port}), h.SimpleHTTPRequestHandler).serve_forever()"
    );
    jobs.create(
        &kube::api::PostParams::default(),
        &crate::support::vcjob("web", 1, 0, "img", &["python3", "-c", &serve]),
    )
    .await
    .unwrap();
    crate::support::wait_phase(&jobs, "web", "Running").await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(ctx.client.clone(), "default");
    let answer = crate::support::eventually("an HTTP answer through the forward", 30, || async {
        let mut forwarder = pods.portforward("web-worker-0", &[port]).await.ok()?;
        let mut stream = forwarder.take_stream(port)?;
        stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        answer.starts_with("HTTP/1.0 200").then_some(answer)
    })
    .await;
    assert!(answer.contains("Directory listing"), "{answer}");

    let closed = free_port();
    let mut forwarder = pods.portforward("web-worker-0", &[closed]).await.unwrap();
    let error = forwarder.take_error(closed).unwrap().await.unwrap();
    assert!(error.contains(&format!("error forwarding port {closed} to pod")), "{error}");
    let Err(err) = pods.portforward("nobody", &[port]).await else { panic!("a forward to a pod that does not exist") };
    assert!(err.to_string().contains("404") || err.to_string().contains("not found"), "{err}");
}

//! The SSH transport against a real sshd: quoting, exit codes, streaming, the concurrency
//! limit, retries and `~/.ssh/config` aliases.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use sha2::{Digest, Sha256};
use theseus_backend_ssh::ssh::{Backoff, KnownHostsPolicy, RemoteCommand, SshError, SshHost, SshOptions};

use crate::require_lab;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_arguments_round_trip_byte_for_byte() {
    let lab = require_lab!();
    let host = SshHost::new(lab.options("hostile"));
    let pwned = lab.scratch("hostile").join("pwned");
    let words = [
        "it's".to_owned(),
        format!("$(touch {})", pwned.display()),
        format!("`touch {}`", pwned.display()),
        "a  b\tc".into(),
        "new\nline".into(),
        String::new(),
        "✓ ünïcode".into(),
        "*".into(),
        "~".into(),
        ";|&><(){}[]!#".into(),
        "\\".into(),
        "\"double\"".into(),
        "-n".into(),
    ];
    let cmd = RemoteCommand::new("printf").arg("%s\\0").args(words.iter().cloned());
    let out = host.run(&cmd).await.unwrap();
    let got: Vec<String> = out.stdout.split(|b| *b == 0).map(|w| String::from_utf8(w.to_vec()).unwrap()).collect();
    assert_eq!(got[..got.len() - 1], words, "stdout: {:?}", out.stdout_text());
    assert!(!pwned.exists(), "an argument was executed by the remote shell");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_stderr_come_back() {
    let lab = require_lab!();
    let host = SshHost::new(lab.options("exit"));
    let cmd = RemoteCommand::script("echo out; echo \"err $1\" >&2; exit 7", ["x y"]);
    let out = host.output(&cmd).await.unwrap();
    assert_eq!((out.code, out.stdout_text().as_str(), out.stderr_text().as_str()), (Some(7), "out\n", "err x y"));
    match host.run(&cmd).await {
        Err(SshError::Failed { code: Some(7), stderr, command, .. }) => {
            assert_eq!(stderr, "err x y");
            assert!(command.contains("echo out"), "{command}");
        }
        other => panic!("expected a failure with exit code 7, got {other:?}"),
    }
    assert!(host.run(&RemoteCommand::new("true")).await.unwrap().success());
    // openssh reports 127 as an error of its own; it comes back as the exit code.
    let missing = host.output(&RemoteCommand::new("theseus-no-such-program")).await.unwrap();
    assert_eq!(missing.code, Some(127));
    // Every command went over the one connection.
    assert_eq!(host.connect_attempts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_streams_20_mb_with_progress() {
    let lab = require_lab!();
    let host = SshHost::new(lab.options("stdin"));
    const SIZE: u64 = 20 * 1024 * 1024;
    let block = |i: u64| -> Vec<u8> { (0..65536u64).map(|j| ((i * 31 + j * 7) % 251) as u8).collect() };
    let mut local = Sha256::new();
    for i in 0..SIZE / 65536 {
        local.update(block(i));
    }
    let expected = hex(&local.finalize());
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = seen.clone();
    let started = Instant::now();
    let out = host
        .run_with_writer(
            &RemoteCommand::new("sha256sum"),
            move |w| {
                for i in 0..SIZE / 65536 {
                    w.write_all(&block(i))?;
                }
                Ok(())
            },
            Some(Arc::new(move |n| seen2.store(n, Ordering::Relaxed))),
        )
        .await
        .unwrap();
    eprintln!("20 MB through ssh stdin in {:?}", started.elapsed());
    assert_eq!(out.stdout_text().split_whitespace().next(), Some(expected.as_str()));
    assert_eq!(seen.load(Ordering::Relaxed), SIZE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_are_limited_per_host() {
    let lab = require_lab!();
    let mut options = lab.options("limit");
    options.max_concurrent = 2;
    let host = Arc::new(SshHost::new(options));
    host.connect().await.unwrap();
    let dir = lab.scratch("limit");
    let script = r#"mkdir -p "$1"; : > "$1/$2"; sleep 0.5; ls "$1" | wc -l; rm -f "$1/$2""#;
    let started = Instant::now();
    let runs = (0..6).map(|i| {
        let host = host.clone();
        let cmd = RemoteCommand::script(script, [dir.display().to_string(), i.to_string()]);
        async move { host.run(&cmd).await.unwrap().stdout_text().trim().parse::<u32>().unwrap() }
    });
    let counts = futures::future::join_all(runs).await;
    let elapsed = started.elapsed();
    assert!(counts.iter().all(|c| (1..=2).contains(c)), "at most 2 at once: {counts:?}");
    assert!(elapsed >= Duration::from_millis(1500), "6 commands of 0.5 s in 2 slots took only {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_retried_until_the_port_listens() {
    let lab = require_lab!();
    // A port nobody listens on yet; later a forwarder to the lab's sshd opens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut options = SshOptions::new(format!("{}@127.0.0.1", lab.user));
    options.port = Some(port);
    options.keyfile = Some(lab.key.clone());
    options.known_hosts_file = Some(lab.known_hosts_for(port));
    options.control_dir = Some(lab.control_dir("refused"));
    options.backoff = Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(1), attempts: 10 };
    let host = Arc::new(SshHost::new(options));
    let connecting = {
        let host = host.clone();
        tokio::spawn(async move { host.run(&RemoteCommand::new("echo").arg("through")).await })
    };
    // Open the port only once the first attempt was refused and a second one is under way.
    let deadline = Instant::now() + Duration::from_secs(10);
    while host.connect_attempts() < 2 {
        assert!(Instant::now() < deadline, "no second connection attempt");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let upstream = lab.port;
    let forwarder = tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    let out = connecting.await.unwrap().unwrap();
    assert_eq!(out.stdout_text(), "through\n");
    assert!(host.connect_attempts() >= 2, "attempts: {}", host.connect_attempts());
    host.close().await;
    forwarder.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliases_come_from_the_given_ssh_config() {
    let lab = require_lab!();
    let host = SshHost::new(lab.options("alias"));
    let out = host.run(&RemoteCommand::new("id").arg("-un")).await.unwrap();
    assert_eq!(out.stdout_text().trim(), lab.user);

    // Without the config file the alias means nothing: a permanent error, not retried.
    let mut options = lab.options("alias-missing");
    options.config_file = Some(lab.dir.join("empty_config"));
    std::fs::write(lab.dir.join("empty_config"), "").unwrap();
    let host = SshHost::new(options);
    let err = host.run(&RemoteCommand::new("true")).await.unwrap_err();
    assert!(matches!(err, SshError::Connect { attempts: 1, .. }), "{err:?}");

    // An unknown host key under the strict policy is refused, and not retried either.
    let mut options = lab.options("strict");
    options.destination = format!("{}@127.0.0.1", lab.user);
    options.config_file = Some(lab.dir.join("empty_config"));
    options.port = Some(lab.port);
    options.keyfile = Some(lab.key.clone());
    options.known_hosts_file = Some(lab.dir.join("no_known_hosts"));
    options.known_hosts = Some(KnownHostsPolicy::Strict);
    let err = SshHost::new(options.clone()).connect().await.unwrap_err();
    assert!(matches!(err, SshError::Connect { attempts: 1, .. }), "{err:?}");
    options.known_hosts = Some(KnownHostsPolicy::AcceptNew);
    SshHost::new(options).connect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_streams_as_lines_and_a_failure_ends_the_stream() {
    let lab = require_lab!();
    let host = SshHost::new(lab.options("lines"));
    let cmd = RemoteCommand::script("printf 'one\\ntwo\\nthree'; echo bad >&2; exit 3", Vec::<String>::new());
    let items: Vec<_> = host.lines(&cmd).await.unwrap().collect().await;
    let lines: Vec<_> = items.iter().filter_map(|l| l.as_ref().ok().cloned()).collect();
    assert_eq!(lines, ["one", "two", "three"]);
    assert!(
        matches!(items.last(), Some(Err(SshError::Failed { code: Some(3), stderr, .. })) if stderr == "bad"),
        "{items:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced() {
    let lab = require_lab!();
    let options = lab.options("reconnect");
    let ctl = options.control_dir.clone().unwrap();
    let host = Arc::new(SshHost::new(options));
    host.run(&RemoteCommand::new("true")).await.unwrap();
    assert_eq!(super::support::kill_masters(&ctl), 1);
    // A master that died while idle is replaced before the next command starts.
    host.run(&RemoteCommand::new("true")).await.unwrap();
    assert_eq!(host.connect_attempts(), 2);

    // A command running when the connection breaks sees a connection error...
    let mut lines = host.lines(&RemoteCommand::script("echo started; sleep 5", Vec::<String>::new())).await.unwrap();
    assert_eq!(lines.next().await.unwrap().unwrap(), "started");
    assert_eq!(super::support::kill_masters(&ctl), 1);
    let err = lines.next().await.unwrap().unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    drop(lines);

    // ...unless it is retry-safe: then it runs again on a new connection.
    let dir = lab.scratch("reconnect");
    let cmd = RemoteCommand::script(
        r#"mktemp "$1/started.XXXXXX" >/dev/null; sleep 1; echo done"#,
        [dir.display().to_string()],
    )
    .retry_safe();
    let running = {
        let host = host.clone();
        tokio::spawn(async move { host.run(&cmd).await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir(&dir).unwrap().count() == 0 {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(super::support::kill_masters(&ctl), 1);
    let out = running.await.unwrap().unwrap();
    assert_eq!(out.stdout_text(), "done\n");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "ran twice");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_mux_works_too() {
    let lab = require_lab!();
    let mut options = lab.options("process-mux");
    options.mux = theseus_backend_ssh::ssh::Mux::Process;
    let host = SshHost::new(options);
    let out = host.run(&RemoteCommand::new("printf").arg("%s|").args(["a b", "it's", "$HOME"])).await.unwrap();
    assert_eq!(out.stdout_text(), "a b|it's|$HOME|");
    let out = host.output(&RemoteCommand::script("exit 7", Vec::<String>::new())).await.unwrap();
    assert_eq!(out.code, Some(7));
    let out = host
        .run_with_writer(&RemoteCommand::new("wc").arg("-c"), |w| w.write_all(&[7u8; 100_000]), None)
        .await
        .unwrap();
    assert_eq!(out.stdout_text().trim(), "100000");
    let lines: Vec<_> = host.lines(&RemoteCommand::new("seq").arg("3")).await.unwrap().collect().await;
    assert_eq!(lines.into_iter().map(Result::unwrap).collect::<Vec<_>>(), ["1", "2", "3"]);
    assert_eq!(host.connect_attempts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_local_writer_is_reported_as_the_cause() {
    let lab = require_lab!();
    let host = SshHost::new(lab.options("writer-fails"));
    // The remote side fails too (on its cut-off input), but the local error is what happened.
    let cmd = RemoteCommand::script("n=$(wc -c); echo \"got $n\" >&2; exit 3", Vec::<String>::new());
    let produce = |w: &mut dyn std::io::Write| {
        w.write_all(b"partial")?;
        Err(std::io::Error::other("`big.bin` vanished"))
    };
    match host.run_with_writer(&cmd, produce, None).await {
        Err(SshError::Run { source, .. }) => assert!(source.to_string().contains("vanished"), "{source}"),
        other => panic!("expected the local cause, got {other:?}"),
    }
}

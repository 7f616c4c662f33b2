//! The store protocol through `ExecShell` against the simulator's standalone `ExecServer`, on
//! both exec protocols (v4 cannot close stdin), with GNU tools and with busybox alone.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use theseus_backend_volcano::store_shell::ExecShell;
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::store::{self, ExtraFile, Materialize, ShipRequest, StoreError};
use theseus_kube_sim::exec::{ExecServer, ExecServerOptions, Protocols};

use crate::busybox::busybox_bin;
use crate::store_tree::{assert_run_dir_matches, awkward_repo, entries, objects_all_hash_to_their_names, write};

const BOTH: [Protocols; 2] = [Protocols::V5AndV4, Protocols::V4Only];

async fn shell(root: &Path, options: ExecServerOptions) -> (ExecServer, ExecShell) {
    let server = ExecServer::start(root, options).await.unwrap();
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.root_cert = Some(vec![server.ca_der()]);
    let client = Client::try_from(config).unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "team");
    let shell = ExecShell::new(pods, "theseus-ship-run", None, root.to_str().unwrap());
    (server, shell)
}

fn request(code: &Path, root: &Path, run: &str) -> ShipRequest {
    ShipRequest {
        snapshot: Snapshot::collect(code, SnapshotMode::Dirty).unwrap(),
        root: root.to_str().unwrap().to_owned(),
        dest: root.join("p/g/n").join(run).to_str().unwrap().to_owned(),
        mode: Materialize::Link,
        extra: vec![ExtraFile { path: ".theseus/bootstrap.sh".into(), contents: b"echo hi\n".to_vec(), mode: 0o755 }],
        progress: None,
        status: None,
    }
}

#[tokio::test]
async fn the_store_ships_over_exec_on_both_protocols_with_gnu_and_busybox_tools() {
    let busybox = busybox_bin();
    let mut envs = vec![("gnu", Vec::new())];
    if let Some(bin) = &busybox {
        envs.push(("busybox", vec![("PATH".to_owned(), bin.path().to_str().unwrap().to_owned())]));
    }
    for protocols in BOTH {
        for (tools, env) in &envs {
            let case = format!("{protocols:?} {tools}");
            let root = tempfile::tempdir().unwrap();
            let (_server, shell) =
                shell(root.path(), ExecServerOptions { protocols, env: env.clone(), ..Default::default() }).await;
            let code = awkward_repo();
            let first = store::ship(&shell, request(code.path(), root.path(), "r1"))
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert!(first.objects_sent > 0, "{case}");
            assert_run_dir_matches(code.path(), &root.path().join("p/g/n/r1"), Materialize::Link);
            write(&code.path().join("bin/run"), b"#!/bin/sh\nexit 3\n", 0o755);
            let second = store::ship(&shell, request(code.path(), root.path(), "r2"))
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!((second.objects_sent, second.files_present), (1, second.files - 1), "{case}");
            assert_run_dir_matches(code.path(), &root.path().join("p/g/n/r2"), Materialize::Link);
            objects_all_hash_to_their_names(root.path());
            assert_eq!(
                entries(&root.path().join(".theseus/incoming")),
                Vec::<String>::new(),
                "{case}: stdin files left"
            );
        }
    }
}

/// An exec connection cut mid-upload: the ship fails, no object that fails its hash is left and
/// no run dir appears; the next ship (a healthy connection) succeeds.
#[tokio::test]
async fn an_upload_cut_mid_stream_leaves_no_bad_object_and_the_next_ship_succeeds() {
    let code = tempfile::tempdir().unwrap();
    for idx in 0..6u8 {
        write(&code.path().join(format!("blob{idx}.bin")), &vec![idx; 400_000], 0o644);
    }
    for protocols in BOTH {
        let root = tempfile::tempdir().unwrap();
        let cut = ExecServerOptions { protocols, drop_after_stdin_bytes: Some(1_000_000), ..Default::default() };
        let (_server, broken) = shell(root.path(), cut).await;
        let err = store::ship(&broken, request(code.path(), root.path(), "r1")).await.expect_err("the upload is cut");
        assert!(matches!(err, StoreError::Failed(_)), "{protocols:?}: {err}");
        assert!(err.to_string().contains("broke"), "{protocols:?}: {err}");
        assert_eq!(objects_all_hash_to_their_names(root.path()), 0, "{protocols:?}: nothing stored");
        assert!(!root.path().join("p/g/n/r1").exists());
        // What a killed wrapper leaves is a dir of the incoming area, which `reclaim` removes.
        for entry in std::fs::read_dir(root.path().join(".theseus/incoming")).into_iter().flatten().flatten() {
            assert!(entry.file_type().unwrap().is_dir(), "{protocols:?}: {:?} is not a dir", entry.path());
        }

        let (_server, healthy) = shell(root.path(), ExecServerOptions { protocols, ..Default::default() }).await;
        let report = store::ship(&healthy, request(code.path(), root.path(), "r1")).await.unwrap();
        assert_eq!(report.objects_sent, 6, "{protocols:?}");
        assert_run_dir_matches(code.path(), &root.path().join("p/g/n/r1"), Materialize::Link);
        assert_eq!(objects_all_hash_to_their_names(root.path()), 7, "the six blobs and the run's code manifest");
    }
}

/// A script's exit status and stderr come back as `ShellError::Exit`, with and without stdin;
/// its stdout comes back whole; a stdin is given to it byte for byte, also when it is empty.
#[tokio::test]
async fn exit_statuses_stderr_and_stdin_reach_the_caller() {
    use std::sync::Arc;
    use theseus_core::store::{ScriptCall, Shell, ShellError};
    for protocols in BOTH {
        let root = tempfile::tempdir().unwrap();
        let (_server, shell) = shell(root.path(), ExecServerOptions { protocols, ..Default::default() }).await;
        let call = |script: &'static str, stdin: Option<Vec<u8>>| ScriptCall {
            script,
            args: vec!["one arg".into(), "it's".into()],
            stdin: stdin.map(|bytes| -> theseus_core::store::StdinFn { Arc::new(move |w| w.write_all(&bytes)) }),
            stdin_len: None,
            progress: None,
            label: "a test script",
        };
        for stdin in [None, Some(b"input\n".to_vec())] {
            let err = shell.run(call("echo \"bad: $2\" >&2; exit 7", stdin)).await.unwrap_err();
            assert!(
                matches!(&err, ShellError::Exit { code: 7, stderr } if stderr == "bad: it's\n"),
                "{protocols:?}: {err}"
            );
        }
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let out = shell.run(call("cat; printf '%s|' \"$@\"", Some(big.clone()))).await.unwrap();
        assert!(out.len() == big.len() + "one arg|it's|".len() && out.starts_with(&big), "{protocols:?}");
        let out = shell.run(call("wc -c", Some(Vec::new()))).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&out).trim(), "0", "{protocols:?}");
        assert_eq!(entries(&root.path().join(".theseus/incoming")), Vec::<String>::new(), "{protocols:?}");
    }
}

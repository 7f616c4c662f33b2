//! The user's own ssh config decides what the theseus config leaves unset, against the lab's
//! real sshd: a config that turns host key checking off (or to `accept-new`) with an empty or
//! `/dev/null` known-hosts file connects as `ssh ALIAS` does; a theseus `known_hosts: strict`
//! still wins; a probe refused for its host key reports the host as unusable, with the fix.

use std::sync::Arc;
use std::time::Duration;

use theseus_backend_ssh::plain::PlainHost;
use theseus_backend_ssh::plain::{PlainBackend, Settings};
use theseus_backend_ssh::ssh::{Backoff, KnownHostsPolicy, RemoteCommand, SshHost, SshOptions};
use theseus_core::availability::Availability;
use theseus_core::backend::Backend;
use theseus_core::config::ClusterConfig;
use theseus_core::solver::{ChipRequest, Request};

use crate::require_lab;
use crate::support::Lab;

/// An ssh config with one alias `lenient` for the lab's sshd, plus `extra` lines in its block.
fn lenient_config(lab: &Lab, name: &str, extra: &str) -> std::path::PathBuf {
    let path = lab.dir.join(format!("{name}_config"));
    let text = format!(
        "Host lenient\n  HostName {}\n  Port {}\n  User {}\n  IdentityFile {}\n  IdentitiesOnly yes\n  LogLevel ERROR\n{extra}",
        lab.host,
        lab.port,
        lab.user,
        lab.key.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// What a user's config alone gives: no option set by theseus.
fn users_options(lab: &Lab, name: &str, config: std::path::PathBuf) -> SshOptions {
    let mut o = SshOptions::new("lenient");
    o.config_file = Some(config);
    o.control_dir = Some(lab.control_dir(name));
    o.backoff = Backoff { initial: Duration::from_millis(100), max: Duration::from_millis(200), attempts: 2 };
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_without_host_key_checking_connects_as_plain_ssh_does() {
    let lab = require_lab!();
    let config = lenient_config(lab, "off", "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n");
    let plain_ssh = std::process::Command::new("ssh")
        .args(["-o", "BatchMode=yes", "-F"])
        .arg(&config)
        .args(["lenient", "id", "-un"])
        .output()
        .unwrap();
    assert!(plain_ssh.status.success(), "plain ssh: {}", String::from_utf8_lossy(&plain_ssh.stderr));

    let host = SshHost::new(users_options(lab, "user-off", config.clone()));
    let out = host.run(&RemoteCommand::new("id").arg("-un")).await.unwrap();
    assert_eq!(out.stdout_text().trim(), lab.user);
    host.close().await;

    // The theseus config still wins where it speaks: strict, and nothing in /dev/null.
    let mut strict = users_options(lab, "user-off-strict", config);
    strict.known_hosts = Some(KnownHostsPolicy::Strict);
    let err = SshHost::new(strict).connect().await.unwrap_err();
    let reason = theseus_backend_ssh::ssh::host_key_problem(&err).expect("a host key problem");
    assert!(reason.contains("lenient") && reason.contains("known_hosts"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_with_accept_new_records_the_key_in_the_users_file() {
    let lab = require_lab!();
    let known = lab.dir.join("accept_new_known_hosts");
    std::fs::write(&known, "").unwrap();
    let extra = format!("  StrictHostKeyChecking accept-new\n  UserKnownHostsFile {}\n", known.display());
    let host = SshHost::new(users_options(lab, "user-accept-new", lenient_config(lab, "accept_new", &extra)));
    host.run(&RemoteCommand::new("true")).await.unwrap();
    host.close().await;
    let recorded = std::fs::read_to_string(&known).unwrap();
    assert!(recorded.contains(&format!("[{}]:{}", lab.host, lab.port)), "{recorded:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_options_of_the_theseus_config_apply_on_top_of_the_users_config() {
    let lab = require_lab!();
    // The user's config trusts nothing (an empty known-hosts file, strict): the host's
    // `ssh_options` say where the key is.
    let empty = lab.dir.join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let extra = format!("  StrictHostKeyChecking yes\n  UserKnownHostsFile {}\n", empty.display());
    let config = lenient_config(lab, "strict_user", &extra);
    let err = SshHost::new(users_options(lab, "opts-refused", config.clone())).connect().await.unwrap_err();
    assert!(theseus_backend_ssh::ssh::host_key_problem(&err).is_some(), "{err:?}");

    let mut options = users_options(lab, "opts-known", config);
    let known = lab.known_hosts_for(lab.port);
    options.extra_options.insert("UserKnownHostsFile".into(), known.display().to_string());
    let host = SshHost::new(options);
    let out = host.run(&RemoteCommand::new("id").arg("-un")).await.unwrap();
    assert_eq!(out.stdout_text().trim(), lab.user);
    host.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_refused_for_its_host_key_reports_the_host_unusable_with_the_fix() {
    let lab = require_lab!();
    let empty = lab.dir.join("probe_empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let extra = format!("  UserKnownHostsFile {}\n", empty.display());
    let mut options = users_options(lab, "probe-host-key", lenient_config(lab, "probe", &extra));
    options.known_hosts = Some(KnownHostsPolicy::Strict);
    let host = PlainHost { ssh: "lenient".into(), cluster: "lab".into(), ..PlainHost::default() };
    let cluster = ClusterConfig { root: "/r".into(), work: "/w".into(), ..ClusterConfig::default() };
    let backend = PlainBackend::with_ssh("box", host, cluster, Arc::new(SshHost::new(options)), Settings::default());
    let request = Request {
        chip: ChipRequest::Cpu,
        count: 1,
        preferred_clusters: vec![],
        forbidden_clusters: vec![],
        host: None,
    };
    match backend.availability(&request).await {
        Ok(Availability::Unusable { reason }) => {
            assert!(reason.contains("host key"), "{reason}");
            assert!(reason.contains("known_hosts: accept-new"), "the fix is named: {reason}");
        }
        other => panic!("expected an unusable host, got {other:?}"),
    }
}

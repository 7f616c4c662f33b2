//! Every path the local layout makes stays under its configured dir; its coordinator port
//! leaves the next port to torch's `MASTER_PORT`.

use super::*;

fn backend(home: &Path) -> LocalBackend {
    let cluster = ClusterConfig { root: "~/root".into(), work: "~/work".into(), ..ClusterConfig::default() };
    LocalBackend::new("local", LocalHost::default(), cluster, home)
}

fn plan() -> Plan {
    crate::testing::cpu_plan("local", HostKind::LOCAL, 1)
}

#[test]
fn layout_paths_stay_under_the_cluster_dirs() {
    let home = Path::new("/home/u");
    let ok = backend(home).layout(&JobIdentity::new("n", Some("p"), Some("g")), &plan()).unwrap();
    assert!(ok.work_dir.starts_with("/home/u/work/p/g/n/"), "{}", ok.work_dir);
    assert!(ok.run_dir.starts_with("/home/u/root/status/p/g/n/"), "{}", ok.run_dir);

    // An identity made without the name rule (as a library user could) is refused by the layout.
    let escaping = JobIdentity::new("n", Some("../../../../tmp/x"), Some("y"));
    let err = backend(home).layout(&escaping, &plan()).unwrap_err().to_string();
    assert!(err.contains("not under `/home/u/work`") && err.contains("`..`"), "{err}");
}

#[test]
fn the_coordinator_port_leaves_the_next_port_free() {
    let home = Path::new("/home/u");
    let two = crate::testing::cpu_plan("local", HostKind::LOCAL, 2);
    let identity = JobIdentity::new("n", None, None);
    for _ in 0..5 {
        let layout = backend(home).layout(&identity, &two).unwrap();
        let Launch::Local { coordinator_port: port } = layout.launch else { panic!("{:?}", layout.launch) };
        assert!(port < u16::MAX, "{port}");
        std::net::TcpListener::bind(("127.0.0.1", port + 1)).expect("the next port was free");
    }
    let cluster = ClusterConfig { root: "~/root".into(), work: "~/work".into(), ..ClusterConfig::default() };
    let host = LocalHost { coordinator_port: Some(u16::MAX), ..LocalHost::default() };
    let err = LocalBackend::new("local", host, cluster, home).layout(&identity, &two).unwrap_err().to_string();
    assert!(err.contains("hosts.local.coordinator_port: 65535 cannot be used"), "{err}");
}

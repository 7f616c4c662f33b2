//! Every path the local layout makes stays under its configured dir.

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

//! Tests of config loading with the binary's host types: the five layers, merging, host order,
//! strict errors and provenance.

// `figment::Jail` closures return `figment::Result`, whose error is large; that is its API.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};

use figment::Jail;

use theseus_backend_slurm::SlurmHost;
use theseus_backend_slurm::config::PartitionConfig;
use theseus_backend_ssh::plain::PlainHost;
use theseus_backend_volcano::VolcanoHost;
use theseus_core::config::*;
use theseus_core::local::LocalHost;

use crate::host_types;

/// A jail layout: `<jail>/home` is the home dir, `<jail>/proj/sub` the project start.
struct Setup {
    root: PathBuf,
    sources: ConfigSources,
}

impl Setup {
    fn new(jail: &Jail, user: Option<&str>, project: Option<&str>) -> Setup {
        let root = jail.directory().to_path_buf();
        jail.create_dir("home").unwrap();
        jail.create_dir("proj/sub").unwrap();
        // Several setups may share one jail: a file not asked for must not linger.
        for (path, text) in [("home/.theseus.yaml", user), ("proj/.theseus.yaml", project)] {
            match text {
                Some(text) => drop(jail.create_file(path, text).unwrap()),
                None => drop(std::fs::remove_file(root.join(path))),
            }
        }
        let sources = ConfigSources {
            home: Some(root.join("home")),
            project_start: Some(root.join("proj/sub")),
            host_types: host_types(),
            ..ConfigSources::default()
        };
        Setup { root, sources }
    }

    fn env(mut self, key: &str, value: &str) -> Self {
        self.sources.env.push((key.into(), value.into()));
        self
    }

    fn set(mut self, key: &str, value: &str) -> Self {
        self.sources.cli.push((key.into(), value.into()));
        self
    }

    fn project_file(&self) -> String {
        format!("{}/proj/.theseus.yaml", self.root.display())
    }

    fn load(&self) -> LoadedConfig {
        load::load(&self.sources).unwrap_or_else(|e| panic!("config should load: {e}"))
    }

    fn error(&self) -> String {
        match load::load(&self.sources) {
            Ok(c) => panic!("config should not load: {:#?}", c.config),
            Err(e) => e.to_string(),
        }
    }
}

fn source<'a>(loaded: &'a LoadedConfig, key: &str) -> &'a str {
    loaded
        .provenance
        .iter()
        .find(|p| p.key == key)
        .map(|p| p.source.as_str())
        .unwrap_or_else(|| panic!("no provenance for {key}: {:#?}", loaded.provenance))
}

/// The keys of host `name` (without `type`), checking that it is of `kind`.
fn keys_of(config: &DispatchConfig, name: &str, kind: HostKind) -> serde_json::Map<String, serde_json::Value> {
    let host = &config.hosts[name];
    assert_eq!(host.kind(), kind, "{name} is not {kind}: {host:?}");
    let serde_json::Value::Object(mut keys) = host.to_value() else { panic!("a host is a map") };
    keys.remove("type");
    keys
}

/// Host `name`'s settings as the type `T` its kind reads (the connection keys of hosts reached
/// over SSH included).
fn typed<T: serde::de::DeserializeOwned>(config: &DispatchConfig, name: &str, kind: HostKind) -> (SshSettings, T) {
    ssh::parse_with_connection(keys_of(config, name, kind), "test").expect("a host reads back")
}

fn local(config: &DispatchConfig, name: &str) -> LocalHost {
    typed(config, name, HostKind::LOCAL).1
}

fn plain(config: &DispatchConfig, name: &str) -> PlainHost {
    let (connection, host): (SshSettings, PlainHost) = typed(config, name, theseus_backend_ssh::plain::KIND);
    PlainHost { connection, ..host }
}

fn slurm(config: &DispatchConfig, name: &str) -> SlurmHost {
    let (connection, host): (SshSettings, SlurmHost) = typed(config, name, theseus_backend_slurm::KIND);
    SlurmHost { connection, ..host }
}

fn volcano(config: &DispatchConfig, name: &str) -> VolcanoHost {
    typed(config, name, theseus_backend_volcano::KIND).1
}

fn host_names(config: &DispatchConfig) -> Vec<&str> {
    config.hosts.keys().map(String::as_str).collect()
}

#[test]
fn default_config_needs_no_files() {
    let loaded = load::load(&ConfigSources { host_types: host_types(), ..ConfigSources::default() }).unwrap();
    assert_eq!(host_names(&loaded.config), ["local"]);
    assert_eq!(local(&loaded.config, "local"), LocalHost::default());
    let cluster = &loaded.config.clusters["local"];
    assert_eq!(cluster.root, "~/.local/share/theseus");
    assert_eq!(cluster.work, "~/.local/share/theseus/work");
    assert_eq!(loaded.config.clusters.len(), 1);
    assert!(loaded.files.is_empty());
    assert_eq!(
        loaded.provenance,
        [
            ("clusters.local.root", "built-in defaults"),
            ("clusters.local.work", "built-in defaults"),
            ("hosts.local.cluster", "built-in defaults"),
            ("hosts.local.type", "built-in defaults"),
        ]
        .map(|(key, source)| Provenance { key: key.into(), source: source.into() })
    );
}

#[test]
fn default_config_with_home_but_no_files() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, None, None);
        let loaded = setup.load();
        assert_eq!(host_names(&loaded.config), ["local"]);
        assert!(loaded.files.is_empty());
        Ok(())
    });
}

#[test]
fn precedence_of_all_five_layers() {
    Jail::expect_with(|jail| {
        let user =
            "hosts:\n  local:\n    processes: 1\n    coordinator_port: 1001\n    uv_groups: [u]\n    env: {A: u}\n";
        let project = "hosts:\n  local:\n    processes: 2\n    coordinator_port: 1002\n    uv_groups: [p]\n";
        let setup = Setup::new(jail, Some(user), Some(project))
            .env("THESEUSCFG_HOSTS__LOCAL__PROCESSES", "3")
            .env("THESEUSCFG_HOSTS__LOCAL__COORDINATOR_PORT", "1003")
            .env("UNRELATED", "x")
            .set("hosts.local.processes", "4");
        let loaded = setup.load();
        let host = local(&loaded.config, "local");
        assert_eq!(host.processes, Some(4));
        assert_eq!(host.coordinator_port, Some(1003));
        assert_eq!(host.uv_groups, ["p"], "lists replace");
        assert_eq!(host.env.get("A").map(String::as_str), Some("u"));
        assert_eq!(host.cluster, "local");

        assert_eq!(source(&loaded, "hosts.local.processes"), "--set");
        assert_eq!(source(&loaded, "hosts.local.coordinator_port"), "env THESEUSCFG_HOSTS__LOCAL__COORDINATOR_PORT");
        assert_eq!(source(&loaded, "hosts.local.uv_groups"), setup.project_file());
        assert_eq!(source(&loaded, "hosts.local.env.A"), "~/.theseus.yaml");
        assert_eq!(source(&loaded, "hosts.local.cluster"), "built-in defaults");
        assert_eq!(loaded.files, [setup.root.join("home/.theseus.yaml"), setup.root.join("proj/.theseus.yaml")]);
        Ok(())
    });
}

#[test]
fn project_file_overrides_one_field_of_a_user_host() {
    Jail::expect_with(|jail| {
        let user = "hosts:\n  box:\n    ssh: u@box\n    cluster: local\n    chips: {h100: 8}\n    env: {A: '1'}\n";
        let project = "hosts:\n  box:\n    chips: {a6000: 2}\n    env: {B: '2'}\n";
        let loaded = Setup::new(jail, Some(user), Some(project)).load();
        let host = plain(&loaded.config, "box");
        assert_eq!(host.ssh, "u@box");
        assert_eq!(host.cluster, "local");
        assert_eq!(host.chips.into_iter().collect::<Vec<_>>(), [("a6000".to_owned(), 2), ("h100".to_owned(), 8)]);
        assert_eq!(host.env.len(), 2);
        Ok(())
    });
}

#[test]
fn host_order_follows_first_appearance_with_builtin_local_last() {
    Jail::expect_with(|jail| {
        let user = "hosts:\n  zeta: {ssh: z, cluster: local}\n  alpha: {ssh: a, cluster: local}\n";
        let project = "hosts:\n  mid: {ssh: m, cluster: local}\n  alpha: {ssh: a2}\n";
        let loaded = Setup::new(jail, Some(user), Some(project))
            .env("THESEUSCFG_HOSTS__ENVHOST", "{ssh: e, cluster: local}")
            .set("hosts.clihost", "{ssh: c, cluster: local}")
            .set("hosts.local.processes", "2")
            .load();
        assert_eq!(host_names(&loaded.config), ["zeta", "alpha", "mid", "envhost", "clihost", "local"]);
        Ok(())
    });
}

#[test]
fn a_file_that_defines_local_places_it() {
    Jail::expect_with(|jail| {
        let user = "hosts:\n  b: {ssh: b, cluster: local}\n  local: {processes: 2}\n  a: {ssh: a, cluster: local}\n";
        let loaded = Setup::new(jail, Some(user), None).load();
        assert_eq!(host_names(&loaded.config), ["b", "local", "a"]);
        assert_eq!(local(&loaded.config, "local").processes, Some(2));
        Ok(())
    });
}

#[test]
fn cluster_order_follows_first_appearance() {
    Jail::expect_with(|jail| {
        let user = "clusters:\n  z: {root: /z, work: /zw}\n  a: {root: /a, work: /aw}\n";
        let loaded = Setup::new(jail, Some(user), None).load();
        let names: Vec<&str> = loaded.config.clusters.keys().map(String::as_str).collect();
        assert_eq!(names, ["z", "a", "local"]);
        Ok(())
    });
}

#[test]
fn type_defaults_to_plain_and_other_types_parse() {
    Jail::expect_with(|jail| {
        let user = "\
hosts:
  box: {ssh: b, cluster: local}
  cl:
    type: slurm
    ssh: login
    cluster: local
    partitions: [gpu, {name: big, default: true}]
  vk: {type: volcano, cluster: local}
";
        let loaded = Setup::new(jail, Some(user), None).load();
        let kinds: Vec<HostKind> = loaded.config.hosts.values().map(|h| h.kind()).collect();
        assert_eq!(
            kinds,
            [
                theseus_backend_ssh::plain::KIND,
                theseus_backend_slurm::KIND,
                theseus_backend_volcano::KIND,
                HostKind::LOCAL
            ]
        );
        Ok(())
    });
}

#[test]
fn a_later_layer_keeps_the_type_of_a_lower_one() {
    Jail::expect_with(|jail| {
        let user = "hosts:\n  cl: {type: slurm, ssh: login, cluster: local}\n";
        let project = "hosts:\n  cl: {partitions: [gpu]}\n";
        let loaded = Setup::new(jail, Some(user), Some(project)).load();
        assert_eq!(slurm(&loaded.config, "cl").partitions, [PartitionConfig::Name("gpu".into())]);
        Ok(())
    });
}

#[test]
fn chip_aliases_are_canonicalized() {
    Jail::expect_with(|jail| {
        let user = "hosts:\n  box: {ssh: b, cluster: local, chips: {H100: 8}}\ngres_mapping: {H100-80GB: h100}\n";
        let loaded = Setup::new(jail, Some(user), None).load();
        assert_eq!(plain(&loaded.config, "box").chips.get("h100"), Some(&8));
        assert_eq!(loaded.config.gres_mapping.get("h100").map(String::as_str), Some("h100"));
        Ok(())
    });
}

#[test]
fn env_values_are_yaml_and_priority_may_be_comma_separated() {
    Jail::expect_with(|jail| {
        let user = "hosts:\n  a: {ssh: a, cluster: local}\n  b: {ssh: b, cluster: local}\n";
        let loaded = Setup::new(jail, Some(user), None)
            .env("THESEUSCFG_PRIORITY", "[b, a]")
            .env("THESEUSCFG_HOSTS__A__CHIPS__H100", "8")
            .env("THESEUSCFG_HOSTS__A__ENV__MY_VAR", "x")
            .load();
        assert_eq!(loaded.config.priority, ["b", "a"]);
        let a = plain(&loaded.config, "a");
        assert_eq!(a.chips.get("h100"), Some(&8));
        assert_eq!(a.env.get("MY_VAR").map(String::as_str), Some("x"), "names under env keep their case");
        assert_eq!(source(&loaded, "priority"), "env THESEUSCFG_PRIORITY");

        let loaded = Setup::new(jail, Some(user), None).env("THESEUSCFG_PRIORITY", "b, a").load();
        assert_eq!(loaded.config.priority, ["b", "a"]);
        Ok(())
    });
}

#[test]
fn home_file_is_not_read_twice_and_the_walk_stops_at_the_first_file() {
    Jail::expect_with(|jail| {
        let mut setup = Setup::new(jail, Some("hosts:\n  a: {ssh: a, cluster: local}\n"), None);
        jail.create_dir("home/code/deep").unwrap();
        setup.sources.project_start = Some(setup.root.join("home/code/deep"));
        assert_eq!(setup.load().files, [setup.root.join("home/.theseus.yaml")]);

        jail.create_file("home/code/.theseus.yaml", "hosts:\n  b: {ssh: b, cluster: local}\n").unwrap();
        let loaded = setup.load();
        assert_eq!(loaded.files, [setup.root.join("home/.theseus.yaml"), setup.root.join("home/code/.theseus.yaml")]);
        assert_eq!(source(&loaded, "hosts.b.ssh"), "~/code/.theseus.yaml");
        Ok(())
    });
}

#[test]
fn explicit_file_replaces_the_user_file() {
    Jail::expect_with(|jail| {
        let mut setup = Setup::new(jail, Some("hosts:\n  home-host: {ssh: a, cluster: local}\n"), None);
        jail.create_file("x.yaml", "hosts:\n  x-host: {ssh: x, cluster: local}\n").unwrap();
        setup.sources.explicit_file = Some(setup.root.join("x.yaml"));
        assert_eq!(host_names(&setup.load().config), ["x-host", "local"]);

        setup.sources.explicit_file = Some(setup.root.join("home/missing.yaml"));
        assert_eq!(setup.error(), "dispatch config file ~/missing.yaml does not exist");
        Ok(())
    });
}

// Errors, each naming the source and the key.

#[test]
fn unknown_chip_with_suggestion() {
    Jail::expect_with(|jail| {
        let user = "hosts:\n  gpu-box: {ssh: g, cluster: local, chips: {h10: 8}}\n";
        let setup = Setup::new(jail, Some(user), None);
        assert_eq!(
            setup.error(),
            "~/.theseus.yaml: hosts.gpu-box.chips.h10: unknown chip \"h10\" (did you mean \"h100\"?)"
        );
        Ok(())
    });
}

#[test]
fn unknown_key_lists_expected_keys() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, None, Some("hosts:\n  box: {sshh: b, cluster: local}\n"));
        assert_eq!(
            setup.error(),
            format!(
                "{}: hosts.box.sshh: unknown key \"sshh\" (expected one of: ssh, cluster, chips, uv_groups, env, probe_timeout, known_hosts, connect_timeout, max_sessions, identity_file, port, user, proxy_jump, ssh_options, login_env)",
                setup.project_file()
            )
        );
        let setup = Setup::new(jail, None, Some("hostz: {}\n"));
        assert_eq!(
            setup.error(),
            format!(
                "{}: hostz: unknown key \"hostz\" (expected one of: mount, proxy, clusters, hosts, priority, gres_mapping)",
                setup.project_file()
            )
        );
        Ok(())
    });
}

#[test]
fn negative_chip_count() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, None, Some("hosts:\n  box: {ssh: b, cluster: local, chips: {h100: -1}}\n"));
        assert_eq!(
            setup.error(),
            format!("{}: hosts.box.chips.h100: invalid count -1: counts must be 0 or more", setup.project_file())
        );
        let setup = Setup::new(jail, None, None).env("THESEUSCFG_HOSTS__LOCAL__CHIPS__H100", "-2");
        assert_eq!(
            setup.error(),
            "env THESEUSCFG_HOSTS__LOCAL__CHIPS__H100: hosts.local.chips.h100: invalid count -2: counts must be 0 or more"
        );
        Ok(())
    });
}

/// A `priority` entry naming no host is skipped with a warning, as the original skipped it: a
/// host removed from `hosts` does not stop every command.
#[test]
fn unknown_priority_host_is_skipped_with_a_warning() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, Some("hosts:\n  gpu-box: {ssh: g, cluster: local}\n"), None)
            .env("THESEUSCFG_PRIORITY", "[gpu-bx, local, gone, gpu-box]");
        let loaded = setup.load();
        assert_eq!(loaded.config.priority, ["local", "gpu-box"]);
        let order: Vec<&str> = loaded.config.ordered_hosts().into_iter().map(|(n, _)| n).collect();
        assert_eq!(order, ["local", "gpu-box"]);
        assert_eq!(
            loaded.warnings,
            [
                "env THESEUSCFG_PRIORITY: priority[0]: unknown host \"gpu-bx\" (did you mean \"gpu-box\"?); the entry \
                 is skipped",
                "env THESEUSCFG_PRIORITY: priority[2]: unknown host \"gone\" (known hosts: gpu-box, local); the entry is \
                 skipped",
            ]
        );
        Ok(())
    });
}

#[test]
fn unknown_cluster_lists_known_clusters() {
    Jail::expect_with(|jail| {
        let mut setup = Setup::new(jail, None, None);
        let text = "clusters:\n  c1: {root: /r, work: /w}\nhosts:\n  box: {ssh: b, cluster: c2}\n";
        jail.create_file("x.yaml", text).unwrap();
        setup.sources.explicit_file = Some(setup.root.join("x.yaml"));
        assert_eq!(
            setup.error(),
            format!(
                "{}/x.yaml: hosts.box.cluster: unknown cluster \"c2\" (known clusters: c1, local)",
                setup.root.display()
            )
        );
        Ok(())
    });
}

#[test]
fn unknown_cluster_set_by_a_later_layer_names_that_layer() {
    Jail::expect_with(|jail| {
        let setup =
            Setup::new(jail, Some("hosts:\n  box: {ssh: b, cluster: local}\n"), None).set("hosts.box.cluster", "locl");
        assert_eq!(setup.error(), "--set: hosts.box.cluster: unknown cluster \"locl\" (did you mean \"local\"?)");
        Ok(())
    });
}

#[test]
fn yaml_syntax_error_has_line_and_column() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, Some("hosts:\n  box: [1, 2\n  x: 3\n"), None);
        let error = setup.error();
        assert!(error.starts_with("~/.theseus.yaml: invalid YAML: line "), "{error}");
        assert!(error.contains(" column "), "{error}");

        let setup = Setup::new(jail, Some("priority: [a]\npriority: [b]\n"), None);
        assert_eq!(setup.error(), "~/.theseus.yaml: invalid YAML: line 2 column 1: duplicate mapping key: priority");
        Ok(())
    });
}

#[test]
fn tpu_hosts_load_as_tpu_hosts_and_priority_entries_naming_them_stay() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(
            jail,
            Some(
                "priority: [pod, local]\nhosts:\n  pod: {type: tpu, cluster: local, zone: us-central2-b, \
                 accelerator_type: v4-8}\n",
            ),
            None,
        );
        let loaded = setup.load();
        assert_eq!(loaded.config.hosts["pod"].kind().to_string(), "tpu");
        assert_eq!(loaded.config.priority, ["pod", "local"]);
        assert!(loaded.warnings.is_empty(), "{:#?}", loaded.warnings);
        Ok(())
    });
}

#[test]
fn the_original_example_config_loads_with_warnings() {
    Jail::expect_with(|jail| {
        let text = include_str!("../../../core/test_data/original-dispatch.yaml");
        let setup = Setup::new(jail, Some(text), None);
        let loaded = setup.load();
        let hosts: Vec<&str> = loaded.config.hosts.keys().map(String::as_str).collect();
        assert!(
            hosts.contains(&"my-tpu-v4") && hosts.contains(&"gpu-cluster") && hosts.contains(&"hpc-login"),
            "{hosts:?}"
        );
        assert_eq!(loaded.config.hosts["my-tpu-v4"].kind().to_string(), "tpu");
        assert_eq!(loaded.warnings.len(), 1, "{:#?}", loaded.warnings);
        let juicefs = &loaded.warnings[0];
        assert!(
            juicefs.starts_with("~/.theseus.yaml: clusters.hpc: mount, cache_size, cache_dir, all_squash are ignored"),
            "{juicefs}"
        );
        assert!(juicefs.contains("nothing will be mounted at `/mnt/juicefs/theseus`"), "{juicefs}");
        Ok(())
    });
}

/// JuiceFS keys of a cluster that Volcano hosts use are ignored with a warning, as the
/// original ignored them there: pods see only the PVC.
#[test]
fn juicefs_keys_of_a_volcano_cluster_are_named_in_a_warning() {
    Jail::expect_with(|jail| {
        let text = "clusters:\n  k8s: {root: /workspace/r, work: /workspace/w, mount: \"redis://h:6379/1\"}\n\
                    hosts:\n  vk: {type: volcano, cluster: k8s, image: i, pvc_name: p}\n";
        let loaded = Setup::new(jail, Some(text), None).load();
        assert_eq!(
            loaded.warnings,
            ["~/.theseus.yaml: clusters.k8s: mount is ignored for volcano hosts (vk): their pods see only the PVC; \
              to use JuiceFS there, put it behind the PVC (the JuiceFS CSI driver)"]
        );
        Ok(())
    });
}

#[test]
fn gres_mapping_values_are_bare_gres_types() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, Some("gres_mapping: {a100-sxm4-80gb: \"gpu:a100\"}\n"), None);
        assert_eq!(
            setup.error(),
            "~/.theseus.yaml: gres_mapping.a100-sxm4-80gb: `gpu:a100` includes the `gpu:` prefix; write the bare GRES \
             type `a100` (theseus writes `gpu:a100:N`)"
        );
        let setup = Setup::new(jail, Some("gres_mapping: {h100: \"h100 80gb\"}\n"), None);
        assert!(setup.error().contains("is not a GRES type"), "{}", setup.error());
        Ok(())
    });
}

#[test]
fn env_variables_address_hosts_whose_names_contain_hyphens() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(
            jail,
            Some("clusters:\n  c: {root: /r, work: /w}\nhosts:\n  gpu-box: {ssh: g, cluster: c, chips: {h100: 8}}\n"),
            None,
        )
        .env("THESEUSCFG_HOSTS__GPU_BOX__CHIPS__H100", "4");
        let loaded = setup.load();
        let host = plain(&loaded.config, "gpu-box");
        assert_eq!(host.chips["h100"], 4);
        assert!(!loaded.config.hosts.contains_key("gpu_box"));
        assert_eq!(source(&loaded, "hosts.gpu-box.chips.h100"), "env THESEUSCFG_HOSTS__GPU_BOX__CHIPS__H100");
        Ok(())
    });
}

#[test]
fn unknown_host_type_lists_valid_types() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, Some("hosts:\n  pod: {type: gpu, cluster: local}\n"), None);
        assert_eq!(
            setup.error(),
            "~/.theseus.yaml: hosts.pod.type: unknown host type \"gpu\" (expected one of: plain, slurm, volcano, tpu, local)"
        );
        Ok(())
    });
}

#[test]
fn missing_required_keys_name_the_defining_layer() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, None, Some("hosts:\n  box: {cluster: local}\n"));
        assert_eq!(setup.error(), format!("{}: hosts.box: missing required key \"ssh\"", setup.project_file()));

        let setup = Setup::new(jail, Some("clusters:\n  c: {work: /w}\n"), Some("clusters:\n  c: {log: /l}\n"));
        assert_eq!(setup.error(), "~/.theseus.yaml: clusters.c: missing required key \"root\"");
        Ok(())
    });
}

#[test]
fn mount_and_proxy_are_mutually_exclusive() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, Some("mount: /mnt/theseus\n"), None).set("proxy", "me@box:/srv");
        assert_eq!(setup.error(), "--set: proxy: `mount` and `proxy` are mutually exclusive");
        Ok(())
    });
}

#[test]
fn invalid_host_env_name() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, Some("hosts:\n  local: {env: {'1BAD': x}}\n"), None);
        assert_eq!(setup.error(), "~/.theseus.yaml: hosts.local.env.1BAD: invalid environment variable name \"1BAD\"");
        Ok(())
    });
}

#[test]
fn two_spellings_of_one_chip() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, Some("hosts:\n  local: {chips: {h100: 1, H100-80GB: 2}}\n"), None);
        assert_eq!(
            setup.error(),
            "~/.theseus.yaml: hosts.local.chips.h100: \"H100-80GB\" and \"h100\" are the same chip (h100)"
        );
        Ok(())
    });
}

#[test]
fn gres_mapping_keys_are_chips() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, Some("gres_mapping: {a100x: a100}\n"), None);
        let error = setup.error();
        assert!(error.starts_with("~/.theseus.yaml: gres_mapping.a100x: unknown chip \"a100x\""), "{error}");
        Ok(())
    });
}

#[test]
fn empty_slurm_partition_name() {
    Jail::expect_with(|jail| {
        let setup =
            Setup::new(jail, Some("hosts:\n  cl: {type: slurm, ssh: l, cluster: local, partitions: ['']}\n"), None);
        assert_eq!(setup.error(), "~/.theseus.yaml: hosts.cl.partitions: partitions[0]: empty partition name");
        Ok(())
    });
}

#[test]
fn malformed_settings() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, None, None).set("hosts..ssh", "x");
        assert_eq!(setup.error(), "--set hosts..ssh: invalid key: empty key segment");
        let setup = Setup::new(jail, None, None).set("hosts.local.processes", "[1");
        assert!(
            setup.error().starts_with("--set hosts.local.processes: invalid YAML value: line 1"),
            "{}",
            setup.error()
        );
        let setup = Setup::new(jail, None, None).set("hosts.local.processes", "many");
        assert_eq!(setup.error(), "--set: hosts.local.processes: invalid type: string \"many\", expected u32");
        Ok(())
    });
}

#[test]
fn host_config_reads_with_default_type() {
    let read = |value: serde_json::Value| {
        let serde_json::Value::Object(body) = value else { panic!("a map") };
        host_types().parse(body, "host")
    };
    let host = read(serde_json::json!({"ssh": "a", "cluster": "c"})).unwrap();
    assert_eq!(host.kind(), theseus_backend_ssh::plain::KIND);
    // A tpu host reads as one (its zone and accelerator type are checked once layers merge).
    let host = read(serde_json::json!({"type": "tpu", "cluster": "c"})).unwrap();
    assert_eq!(host.kind().to_string(), "tpu");
    let error = read(serde_json::json!({"type": "local", "ssh": "x"})).unwrap_err();
    let error = format!("{}: {}", error.path, error.message);
    assert!(error.starts_with("host.ssh: unknown key \"ssh\""), "{error}");
}

#[test]
fn tilde_expansion_and_display() {
    let home = Path::new("/home/me");
    assert_eq!(expand_tilde("~", home), PathBuf::from("/home/me"));
    assert_eq!(expand_tilde("~/x/y", home), PathBuf::from("/home/me/x/y"));
    assert_eq!(expand_tilde("/abs/~", home), PathBuf::from("/abs/~"));
    assert_eq!(expand_tilde("~other/x", home), PathBuf::from("~other/x"));
    assert_eq!(display_path(Path::new("/home/me/.theseus.yaml"), Some(home)), "~/.theseus.yaml");
    assert_eq!(display_path(Path::new("/srv/x.yaml"), Some(home)), "/srv/x.yaml");
    assert_eq!(display_path(Path::new("/home/me/x"), None), "/home/me/x");
}

#[test]
fn a_broken_file_shows_where_not_what() {
    Jail::expect_with(|jail| {
        let setup = Setup::new(jail, Some("clusters:\n  c: {root: /r, work: /w, wandb: SECRETTOKEN123, x: [}\n"), None);
        let error = setup.error();
        assert!(error.starts_with("~/.theseus.yaml: invalid YAML: line 2 column "), "{error}");
        assert!(!error.contains("SECRETTOKEN123"), "{error}");
        Ok(())
    });
    assert_eq!(
        load::redact_quoted("invalid type: string \"hunter22\", expected ',' or '}' near `tok`"),
        "invalid type: string \"…\", expected ',' or '}' near \"…\""
    );
    assert_eq!(
        load::yaml_message("error: line 4 column 36: bad\n --> <input>:4:36\n4 | token: x"),
        "line 4 column 36: bad"
    );
}

#[test]
fn dispatch_config_files_must_be_small_regular_files() {
    Jail::expect_with(|jail| {
        let mut setup = Setup::new(jail, None, None);
        let fifo = setup.root.join("fifo.yaml");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        setup.sources.explicit_file = Some(fifo);
        let error = setup.error();
        assert!(error.contains("fifo.yaml: not a regular file (a FIFO)"), "{error}");

        let big = setup.root.join("big.yaml");
        std::fs::write(&big, vec![b'#'; (theseus_core::files::CONFIG_LIMIT + 1) as usize]).unwrap();
        setup.sources.explicit_file = Some(big);
        let error = setup.error();
        assert!(error.contains("big.yaml: larger than the limit of 4 MiB"), "{error}");
        Ok(())
    });
}

#[test]
fn cluster_paths_are_absolute_and_normalised() {
    Jail::expect_with(|jail| {
        for (cluster, want) in [
            ("{root: '', work: /w}", "~/.theseus.yaml: clusters.c.root: \"\": empty path"),
            (
                "{root: /r, work: relative/dir}",
                "~/.theseus.yaml: clusters.c.work: \"relative/dir\": not an absolute path",
            ),
            (
                "{root: /r, work: /w, status: /r/../etc}",
                "~/.theseus.yaml: clusters.c.status: \"/r/../etc\": not normalised",
            ),
            (
                "{root: /r, work: /w, uv_dir: ./uv}",
                "~/.theseus.yaml: clusters.c.uv_dir: \"./uv\": not an absolute path",
            ),
        ] {
            let setup = Setup::new(jail, Some(&format!("clusters:\n  c: {cluster}\n")), None);
            let error = setup.error();
            assert!(error.starts_with(want), "{cluster}: {error}");
        }
        let setup = Setup::new(jail, None, None).set("clusters.local.work", "w");
        assert!(
            setup.error().starts_with("--set: clusters.local.work: \"w\": not an absolute path"),
            "{}",
            setup.error()
        );
        let setup = Setup::new(jail, Some("clusters:\n  c: {root: ~/r, work: /w/x/, log: ~}\n"), None);
        setup.load();
        Ok(())
    });
}

#[test]
fn ssh_destinations_cannot_be_options() {
    Jail::expect_with(|jail| {
        for (ssh, want) in [
            ("'-oProxyCommand=touch /tmp/x'", "starts with `-`"),
            ("'a b'", "whitespace"),
            ("''", "empty ssh destination"),
        ] {
            for kind in ["plain", "slurm"] {
                let config = format!(
                    "clusters:\n  c: {{root: /r, work: /w}}\nhosts:\n  h: {{type: {kind}, ssh: {ssh}, cluster: c}}\n"
                );
                let error = Setup::new(jail, Some(&config), None).error();
                assert!(
                    error.starts_with("~/.theseus.yaml: hosts.h.ssh: ") && error.contains(want),
                    "{kind} {ssh}: {error}"
                );
            }
        }
        Setup::new(
            jail,
            Some("clusters:\n  c: {root: /r, work: /w}\nhosts:\n  h: {ssh: 'u@box-1.lab:2222', cluster: c}\n"),
            None,
        )
        .load();
        Ok(())
    });
}

#[test]
fn counts_are_bounded() {
    Jail::expect_with(|jail| {
        let error = Setup::new(jail, Some("hosts:\n  local: {type: local, processes: 4294967295}\n"), None).error();
        assert_eq!(error, "~/.theseus.yaml: hosts.local.processes: invalid count 4294967295: at most 65536");
        let error = Setup::new(jail, Some("hosts:\n  local: {type: local, chips: {h100: 100000}}\n"), None).error();
        assert_eq!(error, "~/.theseus.yaml: hosts.local.chips.h100: invalid count 100000: at most 65536");
        Ok(())
    });
}

#[test]
fn materialize_is_link_or_copy() {
    let good: ClusterConfig = serde_saphyr::from_str("{root: /r, work: /w, materialize: copy}").unwrap();
    assert_eq!(good.materialize, Some(theseus_core::store::Materialize::Copy));
    let bad = serde_saphyr::from_str::<ClusterConfig>("{root: /r, work: /w, materialize: hardlink}");
    assert!(bad.unwrap_err().to_string().contains("hardlink"));
}

#[test]
fn probe_timeout_is_a_duration_per_remote_host() {
    Jail::expect_with(|jail| {
        let project = "hosts:\n  box: {ssh: b, cluster: local, probe_timeout: 2s}\n  k8s: {type: volcano, cluster: local, probe_timeout: 1.5}\n  hpc: {type: slurm, ssh: h, cluster: local}\n";
        let setup = Setup::new(jail, None, Some(project));
        let config = setup.load().config;
        assert_eq!(config.hosts["box"].probe_timeout(), Some(std::time::Duration::from_secs(2)));
        assert_eq!(config.hosts["k8s"].probe_timeout(), Some(std::time::Duration::from_millis(1500)));
        assert_eq!(config.hosts["hpc"].probe_timeout(), None);
        assert_eq!(config.hosts["local"].probe_timeout(), None);

        let setup = Setup::new(jail, None, Some("hosts:\n  box: {ssh: b, cluster: local, probe_timeout: soon}\n"));
        let error = setup.error();
        assert!(
            error.starts_with(&format!("{}: hosts.box.probe_timeout: \"soon\": ", setup.project_file())),
            "{error}"
        );
        let setup = Setup::new(jail, None, Some("hosts:\n  box: {ssh: b, cluster: local, probe_timeout: 0}\n"));
        let error = setup.error();
        assert!(error.contains("hosts.box.probe_timeout: \"0\": ") && error.contains("more than 0"), "{error}");
        let setup = Setup::new(jail, None, None).env("THESEUSCFG_HOSTS__HPC__TYPE", "slurm");
        let setup = setup.env("THESEUSCFG_HOSTS__HPC__SSH", "h").env("THESEUSCFG_HOSTS__HPC__CLUSTER", "local");
        let setup = setup.env("THESEUSCFG_HOSTS__HPC__PROBE_TIMEOUT", "-1");
        let error = setup.error();
        assert!(error.starts_with("env THESEUSCFG_HOSTS__HPC__PROBE_TIMEOUT: hosts.hpc.probe_timeout: "), "{error}");
        Ok(())
    });
}

/// Issue 23 point 9: the original (and its example) write numbers and booleans unquoted where a
/// string goes; they load as their YAML text, in the user and the project file alike.
#[test]
fn unquoted_numbers_and_booleans_load_as_their_text() {
    Jail::expect_with(|jail| {
        let user = "\
clusters:
  k8s: {root: /r, work: /w, wandb_entity: 42}
hosts:
  gpu:
    type: volcano
    cluster: k8s
    namespace: training
    queue: default
    image: img
    pvc_name: data
    chips: {h100: 8}
    cpu: 32
    memory: 256
    labels: {v: 2, stable: true}
    env: {NCCL_IB_DISABLE: 0, RATIO: 0.5, FLAG: false}
  box:
    ssh: box
    cluster: k8s
    env: {OMP_NUM_THREADS: 8}
";
        let project = "hosts: {box: {env: {DEBUG: true}}}\n";
        let loaded = Setup::new(jail, Some(user), Some(project)).load();
        let gpu = volcano(&loaded.config, "gpu");
        assert_eq!(gpu.cpu.as_deref(), Some("32"));
        assert_eq!(gpu.memory.as_deref(), Some("256"));
        assert_eq!(gpu.labels["v"], "2");
        assert_eq!(gpu.labels["stable"], "true");
        assert_eq!(gpu.env["NCCL_IB_DISABLE"], "0");
        assert_eq!(gpu.env["RATIO"], "0.5");
        assert_eq!(gpu.env["FLAG"], "false");
        let boxed = plain(&loaded.config, "box");
        assert_eq!(boxed.env["OMP_NUM_THREADS"], "8");
        assert_eq!(boxed.env["DEBUG"], "true");
        assert_eq!(loaded.config.clusters["k8s"].wandb_entity.as_deref(), Some("42"));
        Ok(())
    });
}

/// A real type mismatch (a list where a string goes) still stops the config with file and key.
#[test]
fn a_list_where_a_string_goes_is_still_an_error() {
    Jail::expect_with(|jail| {
        let user = "hosts: {box: {ssh: box, cluster: local, env: {A: [1, 2]}}}\n";
        let err = Setup::new(jail, Some(user), None).error();
        assert_eq!(
            err,
            "~/.theseus.yaml: hosts.box.env.A: expected a string, found a list: write one value (in quotes if it \
             holds `: `, `#`, `[` or `{`)"
        );
        Ok(())
    });
}

/// The ledger keeps a run's host config as JSON (for commands without `-d FILE`): every host
/// type of the original example reads back as it was written.
#[test]
fn a_config_written_as_json_reads_back_the_same() {
    Jail::expect_with(|jail| {
        let text = include_str!("../../../core/test_data/original-dispatch.yaml");
        let loaded = Setup::new(jail, Some(text), None).load();
        let json = serde_json::to_value(&loaded.config).unwrap();
        let back = load::from_value(&json, &host_types()).unwrap();
        assert_eq!(back, loaded.config);
        Ok(())
    });
}

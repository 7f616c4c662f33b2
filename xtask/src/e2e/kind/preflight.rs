//! What `cargo xtask e2e` checks before it creates anything: docker (daemon running, API
//! version, platform, image store), kind, kubectl and helm, each present and new enough, with
//! one message naming every problem and its fix. The parsers of each tool's version output are
//! pure and tested on the tools' documented output formats.

use anyhow::{Result, bail};
use serde_json::Value;

use super::runner::Runner;

/// kind release whose node images the pinned `kindest/node` was built for (Volcano 1.15.1's CI
/// uses it too: `go install sigs.k8s.io/kind@v0.31.0` in `.github/workflows/e2e_*.yaml`).
pub(crate) const KIND_EXPECTED: (u32, u32, u32) = (0, 31, 0);
/// `kubectl patch --subresource` came in kubectl 1.24.
const KUBECTL_MIN: (u32, u32, u32) = (1, 24, 0);
/// `docker save --platform` needs the daemon's API 1.48 (Docker 28).
const DOCKER_API_SAVE_PLATFORM: (u32, u32) = (1, 48);

/// What the preflight found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tools {
    /// `os/arch` of the Docker daemon, e.g. `linux/amd64`: the platform images are saved for.
    pub(crate) platform: String,
    /// Whether `docker save --platform` can be used (daemon API 1.48+).
    pub(crate) save_platform: bool,
    /// Whether Docker keeps images in containerd's store (the default of new installs).
    pub(crate) containerd_store: bool,
    pub(crate) kind: (u32, u32, u32),
    pub(crate) warnings: Vec<String>,
}

/// Runs every check and fails naming every problem.
pub(crate) fn check(runner: &mut dyn Runner) -> Result<Tools> {
    let mut problems = Vec::new();
    let mut run = |argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
        runner.run(&argv, None).ok().filter(|o| o.success)
    };
    let docker = run(&[
        "docker",
        "version",
        "--format",
        "{{.Server.Version}} {{.Server.APIVersion}} {{.Server.Os}}/{{.Server.Arch}}",
    ]);
    let info = run(&["docker", "info", "--format", "{{json .DriverStatus}}"]);
    let kind = run(&["kind", "version"]);
    let kubectl = run(&["kubectl", "version", "--client", "--output=json"]);
    let helm = run(&["helm", "version", "--short"]);
    let mut tools = Tools {
        platform: String::new(),
        save_platform: false,
        containerd_store: false,
        kind: (0, 0, 0),
        warnings: Vec::new(),
    };
    match docker.as_ref().map(|o| parse_docker(&o.stdout)) {
        None => problems.push(
            "docker: not installed or its daemon is not running (`docker version` failed); install Docker Engine \
             or Docker Desktop (https://docs.docker.com/get-docker/) and start it"
                .to_owned(),
        ),
        Some(Err(e)) => problems.push(format!("docker: {e}")),
        Some(Ok(d)) => {
            tools.platform = d.platform;
            tools.save_platform = d.api >= DOCKER_API_SAVE_PLATFORM;
            tools.containerd_store = info.as_ref().is_some_and(|o| uses_containerd_store(&o.stdout));
            if tools.containerd_store && !tools.save_platform {
                problems.push(format!(
                    "docker: the daemon (API {}.{}) keeps images in containerd's store, from which `kind load` \
                     fails (`ctr: content digest ... not found`) unless images are saved for one platform with \
                     `docker save --platform`, which needs Docker 28+ (API 1.48); upgrade Docker, or turn off \
                     \"containerd-snapshotter\" in /etc/docker/daemon.json (Docker Desktop: Settings > General > \
                     \"Use containerd for pulling and storing images\")",
                    d.api.0, d.api.1
                ));
            }
        }
    }
    match kind.as_ref().map(|o| parse_kind(&o.stdout)) {
        None => problems.push(
            "kind: not installed (`kind version` failed); install kind v0.31.0 \
             (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
                .to_owned(),
        ),
        Some(None) => problems.push("kind: cannot read the version from `kind version`".to_owned()),
        Some(Some(v)) => {
            tools.kind = v;
            if let Some(problem) = kind_problem(v) {
                problems.push(problem);
            } else if (v.0, v.1) != (KIND_EXPECTED.0, KIND_EXPECTED.1) {
                tools.warnings.push(format!(
                    "kind v{}.{}.{}: the pinned node image was built for kind v0.31; kind supports node images \
                     of other releases only on a best-effort basis",
                    v.0, v.1, v.2
                ));
            }
        }
    }
    match kubectl.as_ref().map(|o| parse_kubectl(&o.stdout)) {
        None => problems.push(
            "kubectl: not installed (`kubectl version --client` failed); install kubectl 1.24 or newer \
             (https://kubernetes.io/docs/tasks/tools/)"
                .to_owned(),
        ),
        Some(None) => problems.push("kubectl: cannot read the version from `kubectl version --client`".to_owned()),
        Some(Some(v)) if v < KUBECTL_MIN => problems.push(format!(
            "kubectl: v{}.{}.{} is too old; the setup needs 1.24+ (`kubectl patch --subresource=status`), \
             and a kubectl within one minor version of the cluster's 1.35 is best",
            v.0, v.1, v.2
        )),
        Some(Some(_)) => {}
    }
    match helm.as_ref().map(|o| parse_helm(&o.stdout)) {
        None => problems.push(
            "helm: not installed (`helm version` failed); install Helm 3 (https://helm.sh/docs/intro/install/)"
                .to_owned(),
        ),
        Some(None) => problems.push("helm: cannot read the version from `helm version --short`".to_owned()),
        Some(Some(v)) if v.0 < 3 => problems.push(format!("helm: v{}.{}.{} is too old; install Helm 3", v.0, v.1, v.2)),
        Some(Some(v)) if v.0 > 3 => tools.warnings.push(format!(
            "helm v{}.{}.{}: the setup was written for Helm 3 (`helm install --repo --wait`) and is untried with \
             Helm {}",
            v.0, v.1, v.2, v.0
        )),
        Some(Some(_)) => {}
    }
    if !problems.is_empty() {
        bail!(
            "`cargo xtask e2e` needs a working Docker, kind, kubectl and helm:\n  {}\n\
             (`cargo xtask e2e --sim` runs the same scenarios against the simulator without them)",
            problems.join("\n  ")
        );
    }
    Ok(tools)
}

/// A kind too old for the pinned node image, if it is.
fn kind_problem(v: (u32, u32, u32)) -> Option<String> {
    (v < KIND_EXPECTED).then(|| {
        format!(
            "kind: v{}.{}.{} is too old for the pinned node image (built for kind v0.31.0, Kubernetes 1.35); \
             install kind v0.31.0",
            v.0, v.1, v.2
        )
    })
}

/// The Docker daemon's facts from `docker version --format '{{.Server.Version}}
/// {{.Server.APIVersion}} {{.Server.Os}}/{{.Server.Arch}}'`.
#[derive(Debug, PartialEq)]
pub(crate) struct Docker {
    pub(crate) api: (u32, u32),
    pub(crate) platform: String,
}

pub(crate) fn parse_docker(out: &str) -> Result<Docker> {
    let words: Vec<&str> = out.split_whitespace().collect();
    let [_version, api, platform] = words[..] else {
        bail!("cannot read `docker version` output `{}`", out.trim());
    };
    let Some((major, minor)) = api.split_once('.').and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))) else {
        bail!("cannot read the daemon's API version `{api}`");
    };
    if !platform.contains('/') {
        bail!("cannot read the daemon's platform `{platform}`");
    }
    Ok(Docker { api: (major, minor), platform: platform.to_owned() })
}

/// Whether `docker info --format '{{json .DriverStatus}}'` shows containerd's image store
/// (`[["driver-type","io.containerd.snapshotter.v1"]]`; the classic store lists the graph
/// driver's details instead).
pub(crate) fn uses_containerd_store(driver_status: &str) -> bool {
    driver_status.contains("io.containerd.snapshotter")
}

/// `kind v0.31.0 go1.25.5 linux/amd64`.
pub(crate) fn parse_kind(out: &str) -> Option<(u32, u32, u32)> {
    out.split_whitespace().find_map(|w| w.strip_prefix('v').and_then(semver))
}

/// `kubectl version --client --output=json`: `clientVersion.gitVersion` (`v1.32.4`, maybe with
/// a vendor suffix).
pub(crate) fn parse_kubectl(out: &str) -> Option<(u32, u32, u32)> {
    let v: Value = serde_json::from_str(out).ok()?;
    semver(v["clientVersion"]["gitVersion"].as_str()?.trim_start_matches('v'))
}

/// `helm version --short`: `v3.16.2+g13654a5`.
pub(crate) fn parse_helm(out: &str) -> Option<(u32, u32, u32)> {
    semver(out.trim().trim_start_matches('v'))
}

/// `1.2.3` followed by anything that is not a digit (`-rc.1`, `+g1234`, `-dispatcher`).
fn semver(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch_text = parts.next()?;
    let digits: String = patch_text.chars().take_while(char::is_ascii_digit).collect();
    Some((major, minor, digits.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::super::runner::Fake;
    use super::*;

    #[test]
    fn reads_each_tools_version_output() {
        assert_eq!(parse_kind("kind v0.31.0 go1.25.5 linux/amd64\n"), Some((0, 31, 0)));
        assert_eq!(parse_kind("kind v0.32.0-alpha+abc go1.26 darwin/arm64"), Some((0, 32, 0)));
        assert_eq!(parse_kind("kind version unknown"), None);
        let kubectl = r#"{"clientVersion":{"major":"1","minor":"32","gitVersion":"v1.32.4-dispatcher"},"kustomizeVersion":"v5.5.0"}"#;
        assert_eq!(parse_kubectl(kubectl), Some((1, 32, 4)));
        assert_eq!(parse_kubectl("Client Version: v1.20.2"), None, "the old text format is not JSON");
        assert_eq!(parse_helm("v3.16.2+g13654a5\n"), Some((3, 16, 2)));
        assert_eq!(parse_helm("v4.0.1+g1234"), Some((4, 0, 1)));
        let docker = parse_docker("28.2.2 1.50 linux/amd64\n").unwrap();
        assert_eq!(docker, Docker { api: (1, 50), platform: "linux/amd64".into() });
        assert!(parse_docker("Cannot connect to the Docker daemon").is_err());
        assert!(uses_containerd_store(r#"[["driver-type","io.containerd.snapshotter.v1"]]"#));
        assert!(!uses_containerd_store(r#"[["Backing Filesystem","extfs"],["Supports d_type","true"]]"#));
    }

    fn healthy(fake: &mut Fake) {
        fake.answer("docker version", vec![Fake::ok("28.2.2 1.50 linux/amd64")])
            .answer("docker info", vec![Fake::ok(r#"[["driver-type","io.containerd.snapshotter.v1"]]"#)])
            .answer("kind version", vec![Fake::ok("kind v0.31.0 go1.25.5 linux/amd64")])
            .answer("kubectl version", vec![Fake::ok(r#"{"clientVersion":{"gitVersion":"v1.35.0"}}"#)])
            .answer("helm version", vec![Fake::ok("v3.19.0+g3d8990f")]);
    }

    #[test]
    fn a_healthy_toolchain_passes_and_says_what_it_found() {
        let mut fake = Fake::default();
        healthy(&mut fake);
        let tools = check(&mut fake).unwrap();
        assert_eq!(tools.platform, "linux/amd64");
        assert!(tools.save_platform && tools.containerd_store);
        assert!(tools.warnings.is_empty(), "{:?}", tools.warnings);
    }

    #[test]
    fn old_or_missing_tools_are_all_named_with_their_fix() {
        let mut fake = Fake::default();
        fake.answer("docker version", vec![Fake::ok("27.5.1 1.47 linux/amd64")])
            .answer("docker info", vec![Fake::ok(r#"[["driver-type","io.containerd.snapshotter.v1"]]"#)])
            .answer("kind version", vec![Fake::ok("kind v0.20.0 go1.20.4 linux/amd64")])
            .answer("kubectl version", vec![Fake::ok(r#"{"clientVersion":{"gitVersion":"v1.20.2"}}"#)])
            .answer("helm", vec![Fake::fail(127, "helm: not found")]);
        let err = check(&mut fake).unwrap_err().to_string();
        for needle in ["docker save --platform", "kind: v0.20.0 is too old", "kubectl: v1.20.2", "helm: not installed"]
        {
            assert!(err.contains(needle), "`{needle}` missing from:\n{err}");
        }
    }

    #[test]
    fn a_classic_image_store_on_an_old_docker_is_fine_and_a_newer_kind_is_a_warning() {
        let mut fake = Fake::default();
        fake.answer("docker version", vec![Fake::ok("24.0.7 1.43 linux/arm64")])
            .answer("docker info", vec![Fake::ok(r#"[["Backing Filesystem","extfs"]]"#)]);
        fake.answer("kind version", vec![Fake::ok("kind v0.32.0 go1.26 linux/arm64")]);
        healthy(&mut fake);
        let tools = check(&mut fake).unwrap();
        assert!(!tools.save_platform && !tools.containerd_store);
        assert_eq!(tools.platform, "linux/arm64");
        assert!(tools.warnings.iter().any(|w| w.contains("best-effort")), "{:?}", tools.warnings);
    }
}

//! A real sshd on 127.0.0.1 for the tests: either a lab described by `THESEUSTEST_SSH_HOST`,
//! `_PORT`, `_USER`, `_KEY` and `_KNOWN_HOSTS`, or one started here (own host key, client key,
//! config and port; key-only login as the current user). When neither is possible the tests
//! print `NOT RUN` and fail under `THESEUSTEST_REQUIRE_ALL=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use theseus_backend_ssh::ssh::{Backoff, KnownHostsPolicy, SshOptions};

/// The ssh config alias every test connects to.
pub(crate) const ALIAS: &str = "theseus-lab";

/// A reachable sshd and the files to log in to it.
#[derive(Debug)]
pub(crate) struct Lab {
    /// State dir (keys, configs, control sockets).
    pub(crate) dir: PathBuf,
    /// Address sshd listens on.
    pub(crate) host: String,
    /// Its port.
    pub(crate) port: u16,
    /// Login user.
    pub(crate) user: String,
    /// Client private key.
    pub(crate) key: PathBuf,
    /// Lines `<host pattern> <key>` known for the server (host part replaced per use).
    pub(crate) host_key: String,
    /// An ssh config defining [`ALIAS`].
    pub(crate) config: PathBuf,
    /// The lab's users whose login shell is tcsh and fish (`THESEUSTEST_SSH_TCSH_USER`,
    /// `THESEUSTEST_SSH_FISH_USER`); none with an sshd of our own.
    pub(crate) shell_users: Vec<(&'static str, String)>,
}

static LAB: OnceLock<Result<Lab, String>> = OnceLock::new();

/// The lab, or `None` after printing why the test does not run (a failure when all tests are
/// required).
pub(crate) fn lab() -> Option<&'static Lab> {
    match LAB.get_or_init(start) {
        Ok(lab) => Some(lab),
        Err(why) => {
            eprintln!("NOT RUN: no sshd for the SSH tests: {why}");
            assert!(std::env::var("THESEUSTEST_REQUIRE_ALL").as_deref() != Ok("1"), "THESEUSTEST_REQUIRE_ALL=1: {why}");
            None
        }
    }
}

/// Returns from the test when there is no lab.
#[macro_export]
macro_rules! require_lab {
    () => {
        match $crate::support::lab() {
            Some(lab) => lab,
            None => return,
        }
    };
}

impl Lab {
    /// Options for [`ALIAS`] through the lab's config file, with a control dir of their own
    /// (so each test's master can be told apart) and quick retries.
    pub(crate) fn options(&self, name: &str) -> SshOptions {
        let mut o = SshOptions::new(ALIAS);
        o.config_file = Some(self.config.clone());
        o.known_hosts = Some(KnownHostsPolicy::Strict);
        o.control_dir = Some(self.control_dir(name));
        o.connect_timeout = Some(Duration::from_secs(5));
        o.backoff = Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(2), attempts: 5 };
        o
    }

    /// [`Lab::options`] logging in as `user` (same key and host).
    pub(crate) fn options_as(&self, name: &str, user: &str) -> SshOptions {
        let mut o = self.options(name);
        o.user = Some(user.to_owned());
        o
    }

    /// The lab's user whose login shell is `shell` (`tcsh`, `fish`), or `None` after printing
    /// why the test does not run (a failure when all tests are required).
    pub(crate) fn shell_user(&self, shell: &str) -> Option<&str> {
        let user = self.shell_users.iter().find(|(s, _)| *s == shell).map(|(_, u)| u.as_str());
        if user.is_none() {
            let why =
                format!("no {shell} user: THESEUSTEST_SSH_{}_USER is not set (run the lab)", shell.to_uppercase());
            eprintln!("NOT RUN: {why}");
            assert!(std::env::var("THESEUSTEST_REQUIRE_ALL").as_deref() != Ok("1"), "THESEUSTEST_REQUIRE_ALL=1: {why}");
        }
        user
    }

    /// A fresh control dir for one test.
    pub(crate) fn control_dir(&self, name: &str) -> PathBuf {
        let dir = self.dir.join("ctl").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A known-hosts file trusting the lab's key at `127.0.0.1:port`.
    pub(crate) fn known_hosts_for(&self, port: u16) -> PathBuf {
        let path = self.dir.join(format!("known_hosts.{port}"));
        std::fs::write(&path, format!("[{}]:{port} {}\n", self.host, self.host_key)).unwrap();
        path
    }

    /// A fresh dir for a test's files (visible to the remote side: the lab is on this machine).
    /// The remote user (the lab's `theseus-test`) may differ from the user running the tests
    /// (root in CI), so the dir is writable by everyone.
    pub(crate) fn scratch(&self, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let parent = self.dir.join("scratch");
        let dir = parent.join(format!("{name}-{}", theseus_core::job::new_run_id()));
        std::fs::create_dir_all(&dir).unwrap();
        for d in [&parent, &dir] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        dir
    }
}

/// Removes the dirs earlier test processes left (a static lab is never dropped, so each run
/// leaves its dir of some 60 MB): those whose process is gone.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("theseus-ssh-it-")) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn start() -> Result<Lab, String> {
    remove_stale_dirs();
    let dir = std::env::temp_dir().join(format!("theseus-ssh-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let lab = match std::env::var("THESEUSTEST_SSH_HOST") {
        Ok(host) => from_env(dir, host)?,
        Err(_) => own_sshd(dir)?,
    };
    wait_for_login(&lab)?;
    Ok(lab)
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("THESEUSTEST_SSH_HOST is set but {name} is not"))
}

fn from_env(dir: PathBuf, host: String) -> Result<Lab, String> {
    let port: u16 = env("THESEUSTEST_SSH_PORT")?.parse().map_err(|e| format!("THESEUSTEST_SSH_PORT: {e}"))?;
    let known = std::fs::read_to_string(env("THESEUSTEST_SSH_KNOWN_HOSTS")?).map_err(|e| e.to_string())?;
    // `<hosts> <type> <key>`: keep the key part.
    let host_key =
        known.lines().find_map(|l| l.split_once(' ').map(|(_, k)| k.to_owned())).ok_or("empty known_hosts")?;
    let lab = Lab {
        config: dir.join("ssh_config"),
        dir,
        host,
        port,
        user: env("THESEUSTEST_SSH_USER")?,
        key: PathBuf::from(env("THESEUSTEST_SSH_KEY")?),
        host_key,
        shell_users: [("tcsh", "THESEUSTEST_SSH_TCSH_USER"), ("fish", "THESEUSTEST_SSH_FISH_USER")]
            .into_iter()
            .filter_map(|(shell, var)| std::env::var(var).ok().map(|u| (shell, u)))
            .collect(),
    };
    write_client_config(&lab)?;
    Ok(lab)
}

fn own_sshd(dir: PathBuf) -> Result<Lab, String> {
    let sshd = Path::new("/usr/sbin/sshd");
    if !sshd.exists() {
        install_openssh_server()?;
    }
    let keygen = |name: &str| -> Result<(), String> {
        let path = dir.join(name);
        if !path.exists() {
            run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", ""]).arg("-f").arg(&path))?;
        }
        Ok(())
    };
    keygen("host_ed25519")?;
    keygen("client_key")?;
    std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).map_err(|e| e.to_string())?;
    set_mode(&dir.join("authorized_keys"), 0o644)?;
    std::fs::create_dir_all("/run/sshd").map_err(|e| format!("create /run/sshd (privilege separation dir): {e}"))?;
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let config = dir.join("sshd_config");
    let d = dir.display();
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_ed25519\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\nPubkeyAuthentication yes\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
             X11Forwarding no\nPrintMotd no\nMaxStartups 100:30:200\nMaxSessions 64\nLogLevel INFO\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    run(Command::new(sshd).arg("-t").arg("-f").arg(&config))?;
    let child = spawn_sshd(&config, &dir.join("sshd.log"))?;
    // sshd outlives a test process that never drops statics: a watchdog stops this PID (and
    // only it) once the test process is gone, then removes the lab's dir.
    Command::new("sh")
        .arg("-c")
        .arg(r#"while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; kill "$2" 2>/dev/null; sleep 1; rm -rf -- "$3""#)
        .arg("sh")
        .arg(std::process::id().to_string())
        .arg(child.id().to_string())
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start the sshd watchdog: {e}"))?;
    let pubkey = std::fs::read_to_string(dir.join("host_ed25519.pub")).map_err(|e| e.to_string())?;
    let host_key = pubkey.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    let user = current_user()?;
    let lab = Lab {
        config: dir.join("ssh_config"),
        key: dir.join("client_key"),
        dir,
        host: "127.0.0.1".into(),
        port,
        user,
        host_key,
        shell_users: Vec::new(),
    };
    write_client_config(&lab)?;
    Ok(lab)
}

/// `/usr/sbin/sshd -D -e -f CONFIG`, its log in `log`.
fn spawn_sshd(config: &Path, log: &Path) -> Result<std::process::Child, String> {
    let log = std::fs::File::create(log).map_err(|e| e.to_string())?;
    Command::new("/usr/sbin/sshd")
        .arg("-D")
        .arg("-e")
        .arg("-f")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("start sshd: {e}"))
}

fn write_client_config(lab: &Lab) -> Result<(), String> {
    let known = lab.known_hosts_for(lab.port);
    let text = format!(
        "Host {ALIAS}\n  HostName {}\n  Port {}\n  User {}\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
         UserKnownHostsFile {}\n  LogLevel ERROR\n",
        lab.host,
        lab.port,
        lab.user,
        lab.key.display(),
        known.display()
    );
    std::fs::write(&lab.config, text).map_err(|e| e.to_string())
}

fn wait_for_login(lab: &Lab) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = Command::new("ssh")
            .arg("-F")
            .arg(&lab.config)
            .args(["-o", "BatchMode=yes", ALIAS, "true"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run ssh: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(lab.dir.join("sshd.log")).unwrap_or_default();
            return Err(format!("login to {ALIAS} failed: {}\nsshd log:\n{log}", String::from_utf8_lossy(&out.stderr)));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn install_openssh_server() -> Result<(), String> {
    if current_user()? != "root" || !Path::new("/usr/bin/apt-get").exists() {
        return Err("/usr/sbin/sshd is missing (apt-get install -y openssh-server)".into());
    }
    eprintln!("installing openssh-server with apt-get for the SSH tests");
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "openssh-server"])
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn current_user() -> Result<String, String> {
    let out = Command::new("id").arg("-un").output().map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr))) }
}

/// PIDs of the ssh ControlMaster processes whose command line names `control_dir`.
pub(crate) fn masters(control_dir: &Path) -> Vec<i32> {
    let needle = control_dir.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let words: Vec<String> = cmdline.split(|b| *b == 0).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
        if words.first().is_some_and(|w| w.ends_with("ssh"))
            && words.iter().any(|w| w == "-M")
            && words.iter().any(|w| w.contains(&needle))
        {
            pids.push(pid);
        }
    }
    pids
}

/// Kills the ControlMaster of `control_dir` (a process these tests started, found by its own
/// socket path). Returns how many were killed.
pub(crate) fn kill_masters(control_dir: &Path) -> usize {
    let pids = masters(control_dir);
    for &pid in &pids {
        let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
    }
    pids.len()
}

/// A second sshd of ours on 127.0.0.1 for the lab's user and key, whose sessions get a `PATH`
/// (sshd's `SetEnv`, as an admin who restricts the remote tools would set it) holding every
/// program of `/usr/bin` but `without`. Stopped (by its PID) when dropped.
pub(crate) struct RestrictedSshd {
    child: std::process::Child,
    port: u16,
    known_hosts: PathBuf,
}

impl RestrictedSshd {
    /// Starts it with its files under `dir`.
    pub(crate) fn start(lab: &Lab, dir: &Path, without: &[&str]) -> RestrictedSshd {
        let bin = dir.join("restricted-bin");
        std::fs::create_dir_all(&bin).unwrap();
        set_mode(&bin, 0o755).unwrap();
        for entry in std::fs::read_dir("/usr/bin").unwrap().flatten() {
            let name = entry.file_name();
            if !without.iter().any(|w| name == std::ffi::OsStr::new(w)) {
                std::os::unix::fs::symlink(entry.path(), bin.join(&name)).unwrap();
            }
        }
        let host_key = dir.join("restricted_host_key");
        run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", ""]).arg("-f").arg(&host_key)).unwrap();
        let authorized = dir.join("restricted_authorized_keys");
        std::fs::copy(lab.key.with_extension("pub"), &authorized).unwrap();
        set_mode(&authorized, 0o644).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let config = dir.join("restricted_sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\n\
                 AllowUsers {}\nPubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nMaxSessions 64\nSetEnv PATH={}\n",
                host_key.display(),
                dir.join("restricted_sshd.pid").display(),
                authorized.display(),
                lab.user,
                bin.display()
            ),
        )
        .unwrap();
        let child = spawn_sshd(&config, &dir.join("restricted_sshd.log")).unwrap();
        let pubkey = std::fs::read_to_string(host_key.with_extension("pub")).unwrap();
        let key = pubkey.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        let known_hosts = dir.join("restricted_known_hosts");
        std::fs::write(&known_hosts, format!("[127.0.0.1]:{port} {key}\n")).unwrap();
        let sshd = RestrictedSshd { child, port, known_hosts };
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the restricted sshd did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        sshd
    }

    /// Options for it, with the lab's user and key, and a control dir of their own.
    pub(crate) fn options(&self, lab: &Lab, name: &str) -> SshOptions {
        let mut o = SshOptions::new("127.0.0.1");
        o.user = Some(lab.user.clone());
        o.port = Some(self.port);
        o.keyfile = Some(lab.key.clone());
        o.known_hosts = Some(KnownHostsPolicy::Strict);
        o.known_hosts_file = Some(self.known_hosts.clone());
        o.control_dir = Some(lab.control_dir(name));
        o.connect_timeout = Some(Duration::from_secs(5));
        o.backoff = Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(2), attempts: 5 };
        // The restriction is sshd's PATH; a login shell would read /etc/profile and set another.
        o.login_env = false;
        o
    }
}

impl Drop for RestrictedSshd {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

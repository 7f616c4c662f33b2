//! [`SshOptions`]: the settings of one host's connection, and how they become an `openssh`
//! [`SessionBuilder`] without overriding the user's own ssh config.
//!
//! openssh passes some options on every master's command line (`StrictHostKeyChecking` always;
//! theseus adds `ConnectTimeout` and `ServerAliveInterval` so a dead host is noticed). An option
//! the theseus config leaves unset takes the value `ssh -G DESTINATION` prints, which is what
//! `ssh DESTINATION` would use: the user's `~/.ssh/config` (or `-F` file), `Match` and `Host`
//! blocks included. Only where ssh itself has no value (`ConnectTimeout none`,
//! `ServerAliveInterval 0`) does theseus use its own default. Free `ssh_options` go into a
//! private config file given with `-F`: those lines first (the first value ssh reads wins), then
//! `Include` of the user's config and of the system config, which `-F` would otherwise skip.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use openssh::{ControlPersist, KnownHosts, SessionBuilder};

use super::SshError;

/// How the server's host key is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownHostsPolicy {
    /// The key must be in a known-hosts file (`StrictHostKeyChecking=yes`).
    Strict,
    /// Unknown hosts are added, changed keys refused (`accept-new`).
    AcceptNew,
    /// No check at all (`no`).
    Off,
}

/// How commands reach the ControlMaster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mux {
    /// openssh speaks the multiplexing protocol itself (no `ssh` process per command).
    #[default]
    Native,
    /// One `ssh -S <socket>` process per command.
    Process,
}

/// `ConnectTimeout` when neither the theseus config nor the user's ssh config sets one.
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// `ServerAliveInterval` when neither the theseus config nor the user's ssh config sets one.
pub(super) const DEFAULT_SERVER_ALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// Settings of one host's connection. `None` means: what the user's ssh config says.
#[derive(Debug, Clone)]
pub struct SshOptions {
    /// `~/.ssh/config` alias, `user@host` or `ssh://user@host:port`.
    pub destination: String,
    /// Login user (overrides the alias's `User`).
    pub user: Option<String>,
    /// Port (overrides the alias's `Port`).
    pub port: Option<u16>,
    /// The only key to offer (`IdentitiesOnly=yes`).
    pub keyfile: Option<PathBuf>,
    /// An ssh config file used instead of `~/.ssh/config` (`ssh -F`).
    pub config_file: Option<PathBuf>,
    /// Host key checking.
    pub known_hosts: Option<KnownHostsPolicy>,
    /// A known-hosts file used instead of the config's `UserKnownHostsFile`.
    pub known_hosts_file: Option<PathBuf>,
    /// `ConnectTimeout` of each connection attempt.
    pub connect_timeout: Option<Duration>,
    /// `ServerAliveInterval`, so a dead server is noticed.
    pub server_alive_interval: Option<Duration>,
    /// `ProxyJump` hops, comma-separated.
    pub proxy_jump: Option<String>,
    /// Any other ssh option (`Key` → value), validated by the config.
    pub extra_options: BTreeMap<String, String>,
    /// Retries of transient connection failures.
    pub backoff: super::Backoff,
    /// Commands that may run at once over the connection (sshd's `MaxSessions` is 10 by default).
    pub max_concurrent: usize,
    /// Where the control socket goes (default: openssh's, under `~/.local/state`).
    pub control_dir: Option<PathBuf>,
    /// How long an idle master outlives its last command (`ControlPersist`), so a process that
    /// dies without closing its session leaves no master behind for long; `None`: forever.
    pub control_persist: Option<Duration>,
    /// How commands reach the master.
    pub mux: Mux,
    /// Whether commands run with the user's login environment (what `$SHELL -l` sets up: PATH
    /// from `~/.profile`, `module load`s), read once per host ([`super::SshHost`]).
    pub login_env: bool,
}

impl SshOptions {
    /// Defaults for `destination`: everything ssh decides from the user's config, 5 attempts,
    /// 8 concurrent commands.
    pub fn new(destination: impl Into<String>) -> Self {
        SshOptions {
            destination: destination.into(),
            user: None,
            port: None,
            keyfile: None,
            config_file: None,
            known_hosts: None,
            known_hosts_file: None,
            connect_timeout: None,
            server_alive_interval: None,
            proxy_jump: None,
            extra_options: BTreeMap::new(),
            backoff: super::Backoff::default(),
            max_concurrent: 8,
            control_dir: None,
            control_persist: Some(Duration::from_secs(60)),
            mux: Mux::Native,
            login_env: true,
        }
    }

    /// The options of a host of the theseus config (`destination` is its `ssh` key); the
    /// settings it leaves unset stay with the user's ssh config.
    pub fn from_settings(destination: &str, settings: &theseus_core::config::SshSettings) -> Self {
        use theseus_core::config::KnownHosts as Configured;
        let mut options = SshOptions::new(destination);
        options.known_hosts = settings.known_hosts.map(|k| match k {
            Configured::Strict => KnownHostsPolicy::Strict,
            Configured::AcceptNew => KnownHostsPolicy::AcceptNew,
            Configured::Off => KnownHostsPolicy::Off,
        });
        options.connect_timeout = settings.connect_timeout();
        if let Some(n) = settings.max_sessions {
            options.max_concurrent = n as usize;
        }
        // ssh expands a leading `~` of `-i` itself.
        options.keyfile = settings.identity_file.as_deref().map(PathBuf::from);
        options.port = settings.port;
        options.user = settings.user.clone();
        options.proxy_jump = settings.proxy_jump.clone();
        options.extra_options = settings.ssh_options.clone();
        options.login_env = settings.login_env.unwrap_or(true);
        options
    }

    /// Whether `ssh -G` must be asked: an option openssh or theseus passes is not set here.
    fn needs_user_values(&self) -> bool {
        self.known_hosts.is_none() || self.connect_timeout.is_none() || self.server_alive_interval.is_none()
    }

    /// Arguments that pick the same config as the master's: `-F`, `-p`, `-l`, `-J`, then the
    /// destination (after `--`; a destination starting with `-` never gets here).
    fn config_args(&self, config_file: Option<&Path>) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if let Some(file) = config_file {
            args.extend(["-F".into(), file.into()]);
        }
        if let Some(port) = self.port {
            args.extend(["-p".into(), port.to_string().into()]);
        }
        if let Some(user) = &self.user {
            args.extend(["-l".into(), user.into()]);
        }
        if let Some(jump) = &self.proxy_jump {
            args.extend(["-J".into(), jump.into()]);
        }
        args
    }

    /// The builder for this host, and the private config file it reads (kept alive until the
    /// master has started). Runs `ssh -G` when an option is left to the user's config.
    pub(super) async fn builder(&self) -> Result<(SessionBuilder, Option<tempfile::NamedTempFile>), SshError> {
        let connect_error = |why: String| SshError::Connect {
            host: self.destination.clone(),
            attempts: 0,
            source: openssh::Error::Connect(std::io::Error::other(why)),
        };
        let private = if self.extra_options.is_empty() {
            None
        } else {
            let text = private_config(&self.extra_options, &self.user_config(), Path::new(SYSTEM_CONFIG));
            Some(
                write_private_config(&text)
                    .map_err(|e| connect_error(format!("cannot write an ssh config file: {e}")))?,
            )
        };
        let config_file = private.as_ref().map(|f| f.path().to_owned()).or_else(|| self.config_file.clone());
        let user = if self.needs_user_values() {
            let mut args = vec![OsString::from("-G")];
            args.extend(self.config_args(config_file.as_deref()));
            args.extend(["--".into(), self.destination.clone().into()]);
            let out = tokio::process::Command::new("ssh")
                .args(&args)
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .map_err(|e| connect_error(format!("cannot run `ssh -G`: {e}")))?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                return Err(connect_error(format!("`ssh -G` refused the ssh config: {}", stderr.trim())));
            }
            UserValues::parse(&String::from_utf8_lossy(&out.stdout))
        } else {
            UserValues::default()
        };
        let mut b = SessionBuilder::default();
        let known_hosts = self.known_hosts.or(user.known_hosts).unwrap_or(KnownHostsPolicy::Strict);
        b.known_hosts_check(match known_hosts {
            KnownHostsPolicy::Strict => KnownHosts::Strict,
            KnownHostsPolicy::AcceptNew => KnownHosts::Add,
            KnownHostsPolicy::Off => KnownHosts::Accept,
        });
        b.connect_timeout(self.connect_timeout.or(user.connect_timeout).unwrap_or(DEFAULT_CONNECT_TIMEOUT));
        b.server_alive_interval(
            self.server_alive_interval.or(user.server_alive_interval).unwrap_or(DEFAULT_SERVER_ALIVE_INTERVAL),
        );
        if let Some(user) = &self.user {
            b.user(user.clone());
        }
        if let Some(port) = self.port {
            b.port(port);
        }
        if let Some(key) = &self.keyfile {
            b.keyfile(key);
        }
        if let Some(file) = &config_file {
            b.config_file(file);
        }
        if let Some(jump) = &self.proxy_jump {
            b.jump_hosts(jump.split(',').map(str::trim).filter(|h| !h.is_empty()));
        }
        if let Some(file) = &self.known_hosts_file {
            b.user_known_hosts_file(file);
        }
        if let Some(dir) = self.control_dir.clone().or_else(short_control_dir) {
            b.control_directory(dir);
        }
        let idle = self.control_persist.and_then(|d| std::num::NonZeroUsize::new(d.as_secs().max(1) as usize));
        b.control_persist(idle.map_or(ControlPersist::Forever, ControlPersist::IdleFor));
        Ok((b, private))
    }

    /// The config file `ssh` reads for this host without `-F`: the given one, else
    /// `~/.ssh/config`.
    fn user_config(&self) -> PathBuf {
        self.config_file.clone().unwrap_or_else(|| {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
            home.join(".ssh/config")
        })
    }
}

/// The system-wide ssh config, which `ssh -F` does not read by itself.
const SYSTEM_CONFIG: &str = "/etc/ssh/ssh_config";

/// The values `ssh -G` printed for the options theseus must pass.
#[derive(Debug, Default, PartialEq, Eq)]
struct UserValues {
    known_hosts: Option<KnownHostsPolicy>,
    connect_timeout: Option<Duration>,
    server_alive_interval: Option<Duration>,
}

impl UserValues {
    /// Reads `ssh -G` output (`key value` lines, keys in lower case). `ConnectTimeout none` and
    /// `ServerAliveInterval 0` are ssh's own "unset".
    fn parse(dump: &str) -> UserValues {
        let mut values = UserValues::default();
        for line in dump.lines() {
            let Some((key, value)) = line.trim().split_once(' ') else { continue };
            let value = value.trim();
            match key {
                "stricthostkeychecking" => {
                    values.known_hosts = Some(match value {
                        "accept-new" => KnownHostsPolicy::AcceptNew,
                        "false" | "no" | "off" => KnownHostsPolicy::Off,
                        // `true`, `yes` and `ask` (which BatchMode turns into a refusal).
                        _ => KnownHostsPolicy::Strict,
                    });
                }
                "connecttimeout" => {
                    values.connect_timeout = value.parse().ok().filter(|s| *s > 0).map(Duration::from_secs);
                }
                "serveraliveinterval" => {
                    values.server_alive_interval = value.parse().ok().filter(|s| *s > 0).map(Duration::from_secs);
                }
                _ => {}
            }
        }
        values
    }
}

/// The private config of a host with `ssh_options`: those options first, then the files ssh
/// would have read without `-F`.
fn private_config(options: &BTreeMap<String, String>, user: &Path, system: &Path) -> String {
    let mut text = String::from("# Written by theseus for one connection: the host's ssh_options, then your config.\n");
    for (key, value) in options {
        // Values are one line without control characters (checked at load); ssh_config(5)
        // reads a double-quoted argument with spaces as one.
        let value = if value.contains([' ', '\t', '#']) && !value.contains('"') {
            format!("\"{value}\"")
        } else {
            value.clone()
        };
        text.push_str(&format!("{key} {value}\n"));
    }
    for file in [user, system] {
        text.push_str(&format!("Include \"{}\"\n", file.display()));
    }
    text
}

fn write_private_config(text: &str) -> std::io::Result<tempfile::NamedTempFile> {
    use std::io::Write as _;
    let mut file = tempfile::Builder::new().prefix("theseus-ssh-").suffix(".conf").tempfile()?;
    file.write_all(text.as_bytes())?;
    file.flush()?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_g_values_are_read_and_ssh_defaults_stay_unset() {
        let dump = "user me\nstricthostkeychecking false\nconnecttimeout none\nserveraliveinterval 0\n";
        assert_eq!(
            UserValues::parse(dump),
            UserValues { known_hosts: Some(KnownHostsPolicy::Off), connect_timeout: None, server_alive_interval: None }
        );
        let dump = "stricthostkeychecking accept-new\nconnecttimeout 7\nserveraliveinterval 15\n";
        assert_eq!(
            UserValues::parse(dump),
            UserValues {
                known_hosts: Some(KnownHostsPolicy::AcceptNew),
                connect_timeout: Some(Duration::from_secs(7)),
                server_alive_interval: Some(Duration::from_secs(15)),
            }
        );
        for strict in ["true", "ask", "yes"] {
            let parsed = UserValues::parse(&format!("stricthostkeychecking {strict}\n"));
            assert_eq!(parsed.known_hosts, Some(KnownHostsPolicy::Strict), "{strict}");
        }
    }

    #[test]
    fn the_private_config_puts_the_hosts_options_before_the_users_files() {
        let options = BTreeMap::from([
            ("ServerAliveCountMax".to_owned(), "5".to_owned()),
            ("ProxyCommand".to_owned(), "nc -X 5 %h %p".to_owned()),
        ]);
        let text = private_config(&options, Path::new("/home/u/.ssh/config"), Path::new("/etc/ssh/ssh_config"));
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                "ProxyCommand \"nc -X 5 %h %p\"",
                "ServerAliveCountMax 5",
                "Include \"/home/u/.ssh/config\"",
                "Include \"/etc/ssh/ssh_config\"",
            ]
        );
    }

    #[test]
    fn only_unset_options_send_theseus_to_ssh_g() {
        let mut options = SshOptions::new("box");
        assert!(options.needs_user_values());
        options.known_hosts = Some(KnownHostsPolicy::Strict);
        options.connect_timeout = Some(Duration::from_secs(3));
        assert!(options.needs_user_values(), "ServerAliveInterval is still the user's");
        options.server_alive_interval = Some(Duration::from_secs(30));
        assert!(!options.needs_user_values());
        options.port = Some(2222);
        options.user = Some("me".into());
        options.proxy_jump = Some("bastion".into());
        let args: Vec<String> =
            options.config_args(Some(Path::new("/tmp/c"))).into_iter().map(|a| a.into_string().unwrap()).collect();
        assert_eq!(args, ["-F", "/tmp/c", "-p", "2222", "-l", "me", "-J", "bastion"]);
    }
}

/// The longest control directory whose sockets still fit a Unix socket's path (108 bytes with
/// its NUL): openssh adds `/.ssh-connectionXXXXXX/master.XXXXXXXXXXXXXXXX` (46 bytes) and ssh a
/// temporary `.XXXXXXXXXXXXXXXX` (17) while it binds.
const MAX_CONTROL_DIR: usize = 107 - 46 - 17;

/// Where the control sockets go when the options say nothing: openssh's default
/// (`~/.local/state`) when its sockets fit a socket path, else `$XDG_RUNTIME_DIR`, else a
/// private dir of ours under `/tmp`. A home such as `/gpfs/fs1/home/department/username` is
/// long enough that openssh's default fails with "path too long for Unix domain socket".
fn short_control_dir() -> Option<PathBuf> {
    let state = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state"));
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    match pick_control_dir(state.as_deref(), runtime.as_deref()) {
        ControlDir::Default => None,
        ControlDir::Runtime(dir) => Some(dir),
        ControlDir::Private => private_tmp_dir(),
    }
}

/// What [`short_control_dir`] chose.
#[derive(Debug, PartialEq, Eq)]
enum ControlDir {
    Default,
    Runtime(PathBuf),
    Private,
}

/// Pure: openssh's default dir `state` if short enough, else `runtime`, else a private dir.
fn pick_control_dir(state: Option<&Path>, runtime: Option<&Path>) -> ControlDir {
    let fits = |p: &Path| p.as_os_str().len() <= MAX_CONTROL_DIR;
    match (state, runtime) {
        (Some(s), _) if fits(s) => ControlDir::Default,
        (_, Some(r)) if fits(r) && r.is_absolute() => ControlDir::Runtime(r.to_owned()),
        _ => ControlDir::Private,
    }
}

/// `/tmp/theseus-ssh-UID`, made private (0700) when missing; `None` (openssh's default, whose
/// error then says why) when it exists and is not ours alone.
fn private_tmp_dir() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let dir = PathBuf::from(format!("/tmp/theseus-ssh-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o077 == 0).then_some(dir)
}

#[cfg(test)]
mod control_dir_tests {
    use super::*;

    #[test]
    fn a_long_home_gets_a_short_control_dir() {
        let short = Path::new("/home/me/.local/state");
        assert_eq!(pick_control_dir(Some(short), None), ControlDir::Default);
        let long = PathBuf::from(format!("/gpfs/fs1/home/{}/.local/state", "d".repeat(40)));
        let runtime = Path::new("/run/user/1000");
        assert_eq!(pick_control_dir(Some(&long), Some(runtime)), ControlDir::Runtime(runtime.to_owned()));
        assert_eq!(pick_control_dir(Some(&long), None), ControlDir::Private);
        assert_eq!(pick_control_dir(None, Some(Path::new("relative"))), ControlDir::Private);
        // The limit is what fits: a socket under the longest default dir fits 108 bytes.
        let longest = PathBuf::from(format!("/{}", "x".repeat(MAX_CONTROL_DIR - 1)));
        assert_eq!(pick_control_dir(Some(&longest), None), ControlDir::Default);
        let socket = format!("{}/.ssh-connectionABCDEF/master.0123456789abcdef.0123456789abcdef", longest.display());
        assert!(socket.len() < 108, "{}", socket.len());
    }

    #[test]
    fn the_private_dir_is_ours_alone() {
        let dir = private_tmp_dir().expect("a private dir under /tmp");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    }
}

# shellcheck shell=bash
# Shared helpers for the lab scripts (sourced by sshd-lab.sh, slurm-lab.sh and lab.sh; not run).
#
# The lab needs root: it installs packages, creates the test user, network namespaces and
# placeholder device nodes. Everything it starts is recorded in a pidfile ("PID MARKER", where
# MARKER is a string of the process's command line); stop kills only those PIDs, and only while
# their command line still contains the marker (so a recycled PID is never killed).

umask 022

LAB_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_REPO=$(cd "$LAB_SCRIPTS/../.." && pwd)
LAB_USER=${THESEUS_LAB_USER:-theseus-test}
# Users whose login shell is tcsh and fish (same key, noisy rc files too).
LAB_TCSH_USER=${THESEUS_LAB_TCSH_USER:-$LAB_USER-tcsh}
LAB_FISH_USER=${THESEUS_LAB_FISH_USER:-$LAB_USER-fish}
# The "other team" of the shared Slurm lab: a second bash user (same key) who submits the
# higher-priority jobs that preempt the test user's (slurm-lab.sh).
LAB_OTHER_USER=${THESEUS_LAB_OTHER_USER:-$LAB_USER-other}
LAB_USER_GECOS="theseus lab test user"
# Packages the lab (and other tests: busybox; the proxy tests: tinyproxy; the log follows: inotify-tools) needs; installed only
# when one is missing (before the tests, so that parallel tests never race for the dpkg lock).
LAB_PACKAGES=(openssh-server openssh-client slurm-wlm slurmctld slurmd slurm-client munge socat
  iproute2 util-linux procps busybox python3 python3-venv tcsh fish zsh tinyproxy inotify-tools)

log() { echo "lab: $*" >&2; }
die() { echo "lab: error: $*" >&2; exit 1; }

# The lab dir: THESEUS_LAB_DIR, else <target>/lab. The test user must traverse it (the munge
# socket, slurm.conf, the shared dir and the venv live there) and the munge socket path must
# fit in a unix socket address, so a default that fails either test (for example a clone under
# /root, which is mode 700) moves to /var/tmp/theseus-lab-<hash of the default>.
resolve_lab_dir() {
  if [[ -n ${THESEUS_LAB_DIR:-} ]]; then
    LAB=$THESEUS_LAB_DIR
    lab_dir_usable "$LAB" || die "THESEUS_LAB_DIR=$LAB is not usable: every parent dir must be" \
      "world-executable (the test user reaches the munge socket there) and the path at most 60 chars"
  else
    LAB=${CARGO_TARGET_DIR:-$LAB_REPO/target}/lab
    if ! lab_dir_usable "$LAB"; then
      LAB=/var/tmp/theseus-lab-$(printf %s "$LAB" | sha256sum | cut -c1-10)
    fi
  fi
  mkdir -p "$LAB"
  LAB=$(cd "$LAB" && pwd)
  chmod 755 "$LAB"
  # One network namespace per lab dir, so labs of different worktrees can run side by side.
  NETNS=theseus-$(printf %s "$LAB" | sha256sum | cut -c1-10)
}

lab_dir_usable() {
  local dir=$1
  [[ $dir == /* && ${#dir} -le 60 ]] || return 1
  while [[ $dir != / ]]; do
    dir=$(dirname "$dir")
    [[ -e $dir ]] || continue
    [[ $(( 0$(stat -c %a "$dir") & 1 )) -eq 1 ]] || return 1
  done
}

require_root() {
  [[ $EUID -eq 0 ]] || die "the lab must run as root (it creates the user $LAB_USER, network" \
    "namespaces and device nodes); run \`cargo xtask lab up\` as root"
}

# Installs the missing packages with apt-get; does nothing when all are installed.
ensure_packages() {
  local p missing=()
  for p in "${LAB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  (( ${#missing[@]} )) || return 0
  [[ $EUID -eq 0 ]] || die "missing packages: ${missing[*]}; run as root (the lab installs them" \
    "with apt-get) or: sudo apt-get install -y ${missing[*]}"
  command -v apt-get >/dev/null || die "missing packages: ${missing[*]}, and there is no apt-get"
  log "installing ${missing[*]} with apt-get"
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  local out
  out=$(mktemp)
  if ! "${apt[@]}" "${missing[@]}" > "$out" 2>&1; then
    log "apt-get install failed; running apt-get update and retrying"
    apt-get update -qq >> "$out" 2>&1 || { cat "$out" >&2; die "apt-get update failed"; }
    "${apt[@]}" "${missing[@]}" >> "$out" 2>&1 || { cat "$out" >&2; die "apt-get install ${missing[*]} failed"; }
  fi
  rm -f "$out"
}

# The unprivileged users the tests log in as: $LAB_USER (bash), $LAB_TCSH_USER (tcsh),
# $LAB_FISH_USER (fish) and $LAB_OTHER_USER (bash, the other team of the Slurm lab). Created once (home dir) and kept: other labs on the machine may use them
# at the same time. Their rc files are (re)written on every start: see write_noisy_rc.
ensure_test_user() {
  ensure_user "$LAB_USER" /bin/bash
  ensure_user "$LAB_TCSH_USER" /usr/bin/tcsh
  ensure_user "$LAB_FISH_USER" /usr/bin/fish
  ensure_user "$LAB_OTHER_USER" /bin/bash
  write_noisy_rc
}

# ensure_user NAME SHELL
ensure_user() {
  local user=$1 shell=$2
  if ! id "$user" >/dev/null 2>&1; then
    log "creating user $user (shell $shell)"
    useradd --create-home --shell "$shell" --comment "$LAB_USER_GECOS" "$user"
  fi
  [[ $(getent passwd "$user" | cut -d: -f7) == "$shell" ]] || usermod --shell "$shell" "$user"
  # useradd leaves '!' (locked) in shadow, and with UsePAM no sshd refuses even key logins to a
  # locked account; '*' means "no password" without the lock.
  if [[ $(getent shadow "$user" | cut -d: -f2) == '!'* ]]; then
    [[ $(getent passwd "$user" | cut -d: -f5) == "$LAB_USER_GECOS" ]] \
      || die "user $user exists, is locked and was not made by the lab; pick another THESEUS_LAB_USER"
    usermod -p '*' "$user"
  fi
}

# The users' rc files, as dirty as real login nodes: every shell they start prints a banner on
# stdout and on stderr (bash reads ~/.bashrc for `ssh host CMD` on Debian, tcsh ~/.tcshrc and
# fish config.fish for every shell), login shells print more (~/.bash_profile, ~/.profile,
# ~/.login) and only they put ~/site-tools/bin, with `theseus-site-tool`, on PATH (like a
# `module load` in ~/.profile) and export THESEUS_LAB_PROFILE_TOKEN (a token in ~/.profile).
write_noisy_rc() {
  local user home tool
  for user in "$LAB_USER" "$LAB_TCSH_USER" "$LAB_FISH_USER" "$LAB_OTHER_USER"; do
    home=$(getent passwd "$user" | cut -d: -f6)
    mkdir -p "$home/site-tools/bin" "$home/.config/fish"
    tool=$home/site-tools/bin/theseus-site-tool
    printf '#!/bin/sh\necho "site tool ok: $*"\n' > "$tool"
    chmod 755 "$tool"
    cat > "$home/.bashrc" <<'RC'
# theseus lab: a noisy ~/.bashrc (read for `ssh host CMD` too)
echo "==== Welcome to the theseus lab cluster (bashrc) ===="
echo "bashrc: quota notice: 93% of /home used" >&2
case $- in *i*) ;; *) return ;; esac
RC
    cat > "$home/.bash_profile" <<'RC'
# theseus lab: a noisy ~/.bash_profile that reads ~/.profile
echo "==== bash_profile: login shell ===="
echo "bash_profile: on stderr" >&2
[ -f "$HOME/.profile" ] && . "$HOME/.profile"
[ -f "$HOME/.bashrc" ] && . "$HOME/.bashrc"
RC
    cat > "$home/.profile" <<'RC'
# theseus lab: a noisy ~/.profile; the only place that puts the site tools on PATH
echo "==== profile: Module cuda/12.4 loaded ===="
echo "profile: Lmod is automatically replacing gcc" >&2
PATH="$HOME/site-tools/bin:$PATH"
export PATH
THESEUS_LAB_LOGIN_ENV=profile
export THESEUS_LAB_LOGIN_ENV
# A token only login shells export (HF_TOKEN in ~/.profile, as users do): never on a command line.
THESEUS_LAB_PROFILE_TOKEN=lab-profile-token-5f3a91
export THESEUS_LAB_PROFILE_TOKEN
RC
    cat > "$home/.tcshrc" <<'RC'
# theseus lab: a noisy ~/.tcshrc (read by every tcsh)
echo "==== Welcome to the theseus lab cluster (tcshrc) ===="
echo "tcshrc: quota notice" > /dev/stderr
RC
    cat > "$home/.login" <<'RC'
# theseus lab: a noisy ~/.login; the only place that puts the site tools on PATH
echo "==== login: Module cuda/12.4 loaded ===="
echo "login: on stderr" > /dev/stderr
setenv PATH "$HOME/site-tools/bin:$PATH"
setenv THESEUS_LAB_LOGIN_ENV login
setenv THESEUS_LAB_PROFILE_TOKEN lab-profile-token-5f3a91
RC
    cat > "$home/.config/fish/config.fish" <<'RC'
# theseus lab: a noisy config.fish (read by every fish)
echo "==== Welcome to the theseus lab cluster (fish) ===="
echo "fish: quota notice" >&2
if status is-login
    echo "==== fish login: Module cuda/12.4 loaded ===="
    set -gx PATH $HOME/site-tools/bin $PATH
    set -gx THESEUS_LAB_LOGIN_ENV fish
    set -gx THESEUS_LAB_PROFILE_TOKEN lab-profile-token-5f3a91
end
RC
    chown -R "$user:" "$home/site-tools" "$home/.config" "$home/.bashrc" "$home/.bash_profile" \
      "$home/.profile" "$home/.tcshrc" "$home/.login"
  done
}

# The client key pair (root-only private key, for the tests) and the authorized_keys file every
# lab sshd points at (0644: sshd reads it as the target user).
ensure_client_key() {
  mkdir -p "$LAB/ssh"
  [[ -f $LAB/ssh/client_key ]] || ssh-keygen -q -t ed25519 -N '' -C theseus-lab -f "$LAB/ssh/client_key"
  cp "$LAB/ssh/client_key.pub" "$LAB/ssh/authorized_keys"
  chmod 600 "$LAB/ssh/client_key"
  chmod 644 "$LAB/ssh/authorized_keys"
  mkdir -p /run/sshd && chmod 755 /run/sshd   # sshd's privilege-separation dir
}

# write_sshd_config FILE DIR PORT [SETENV...]: a key-only sshd on 127.0.0.1:PORT whose host key,
# pidfile and log live in DIR.
write_sshd_config() {
  local file=$1 dir=$2 port=$3 kv
  shift 3
  [[ -f $dir/host_ed25519 ]] || ssh-keygen -q -t ed25519 -N '' -C theseus-lab-host -f "$dir/host_ed25519"
  {
    echo "# Generated by ci/lab; key-only sshd for the theseus tests."
    echo "Port $port"
    echo "ListenAddress 127.0.0.1"
    echo "HostKey $dir/host_ed25519"
    echo "PidFile $dir/sshd.pid"
    echo "AuthorizedKeysFile $LAB/ssh/authorized_keys"
    echo "AllowUsers $LAB_USER $LAB_TCSH_USER $LAB_FISH_USER $LAB_OTHER_USER"
    echo "PubkeyAuthentication yes"
    echo "PasswordAuthentication no"
    echo "KbdInteractiveAuthentication no"
    echo "UsePAM no"
    # The key files live in the lab dir, whose owner and modes sshd's strict checks reject.
    echo "StrictModes no"
    echo "X11Forwarding no"
    echo "PrintMotd no"
    echo "PrintLastLog no"
    # Tests open many connections and multiplexed sessions at once.
    echo "MaxStartups 100:30:200"
    echo "MaxSessions 64"
    echo "AcceptEnv LANG LC_* THESEUS_*"
    echo "Subsystem sftp /usr/lib/openssh/sftp-server"
    echo "LogLevel INFO"
    for kv in "$@"; do echo "SetEnv $kv"; done
  } > "$file"
  /usr/sbin/sshd -t -f "$file" || die "sshd rejected $file"
}

# A free TCP port on the host's 127.0.0.1 (random in 20000-49999; checked with ss).
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 30000 ))
    [[ -z $(ss -Hltn "sport = :$p") ]] && { echo "$p"; return 0; }
  done
  die "no free port found on 127.0.0.1"
}

# spawn PIDFILE MARKER LOG CMD...: starts CMD in the background and records its PID. CMD must
# exec into the daemon (nohup and nsenter do), so the PID is the daemon's own.
spawn() {
  local pidfile=$1 marker=$2 logfile=$3
  shift 3
  nohup "$@" > "$logfile" 2>&1 < /dev/null &
  echo "$! $marker" > "$pidfile"
}

# pid_alive PIDFILE: the recorded process still runs and is still the one we started.
pid_alive() {
  local pid marker
  [[ -f $1 ]] || return 1
  read -r pid marker < "$1" || return 1
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$marker"
}

# kill_pidfiles PIDFILE...: SIGTERM the recorded processes together, SIGKILL those still running
# after 10 s, and remove the pidfiles.
kill_pidfiles() {
  local f pid marker pids=()
  for f in "$@"; do
    [[ -f $f ]] || continue
    if pid_alive "$f"; then
      read -r pid marker < "$f"
      kill "$pid" 2>/dev/null && pids+=("$pid")
    fi
    rm -f "$f"
  done
  (( ${#pids[@]} )) || return 0
  for _ in $(seq 1 100); do
    local left=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    (( left )) || return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}

# ssh_test PORT CMD...: run CMD (a bash command line) as the test user (or $LAB_SSH_AS) on
# 127.0.0.1:PORT with the lab's key. The user's rc files print banners (write_noisy_rc): stdout is CMD's only, from a
# marker line on; their stderr lines stay on stderr.
ssh_test() {
  local port=$1 rc
  shift
  ssh -q -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$LAB/known_hosts" \
    -o ConnectTimeout=5 -i "$LAB/ssh/client_key" -p "$port" "${LAB_SSH_AS:-$LAB_USER}@127.0.0.1" \
    "echo __theseus_lab_begin__; $*" | sed '0,/^__theseus_lab_begin__$/d'
  rc=${PIPESTATUS[0]}
  return "$rc"
}

# Rebuilds $LAB/known_hosts from the host keys of the lab's sshds.
write_known_hosts() {
  local f
  : > "$LAB/known_hosts.tmp"
  for f in "$LAB"/ssh/known_hosts.line "$LAB"/slurm/login/known_hosts.line; do
    [[ -f $f ]] && cat "$f" >> "$LAB/known_hosts.tmp"
  done
  mv "$LAB/known_hosts.tmp" "$LAB/known_hosts"
  chmod 644 "$LAB/known_hosts"
}

# wait_ssh PORT LOGFILE: wait up to 10 s until the test user can log in.
wait_ssh() {
  for _ in $(seq 1 100); do
    ssh_test "$1" true 2>/dev/null && return 0
    sleep 0.1
  done
  tail -n 20 "$2" >&2
  ssh_test "$1" true || true
  die "no ssh login as $LAB_USER on 127.0.0.1:$1 within 10 s (log: $2)"
}

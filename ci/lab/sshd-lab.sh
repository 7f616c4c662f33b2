#!/usr/bin/env bash
# sshd-lab.sh: a key-only OpenSSH server on 127.0.0.1 for the SSH backend tests.
#
#   ci/lab/sshd-lab.sh start|stop|status|env
#
# Its own config, host key and pidfile under $LAB/ssh; the test user $THESEUS_LAB_USER
# (default theseus-test, shell /bin/bash) and its tcsh and fish twins ($LAB_TCSH_USER,
# $LAB_FISH_USER) log in with the lab's ed25519 key; all have noisy rc files (lib.sh). Nothing under /etc
# changes except the test user (kept on stop) and /run/sshd (sshd's privilege-separation dir).
#
# Environment: THESEUS_LAB_DIR (default <target>/lab, see lib.sh), THESEUS_LAB_SSH_PORT (default:
# a free port), THESEUS_LAB_USER. `start` and `env` print KEY=VALUE lines on stdout.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start() {
  require_root
  ensure_packages
  resolve_lab_dir
  local dir=$LAB/ssh
  if pid_alive "$dir/sshd.pidfile" && ssh_test "$(cat "$dir/port")" true 2>/dev/null; then
    log "sshd already running (pid $(cut -d' ' -f1 "$dir/sshd.pidfile"))"
    env_out
    return 0
  fi
  kill_pidfiles "$dir/sshd.pidfile"
  ensure_test_user
  ensure_client_key
  local port=${THESEUS_LAB_SSH_PORT:-$(free_port)}
  echo "$port" > "$dir/port"
  write_sshd_config "$dir/sshd_config" "$dir" "$port"
  echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$dir/host_ed25519.pub")" > "$dir/known_hosts.line"
  write_known_hosts
  spawn "$dir/sshd.pidfile" "$dir/sshd_config" "$dir/sshd.log" /usr/sbin/sshd -D -e -f "$dir/sshd_config"
  wait_ssh "$port" "$dir/sshd.log"
  log "sshd up on 127.0.0.1:$port (user $LAB_USER)"
  env_out
}

env_out() {
  resolve_lab_dir
  [[ -f $LAB/ssh/port ]] || die "the sshd lab was never started in $LAB"
  echo "THESEUSTEST_LAB_DIR=$LAB"
  echo "THESEUSTEST_SSH_HOST=127.0.0.1"
  echo "THESEUSTEST_SSH_PORT=$(cat "$LAB/ssh/port")"
  echo "THESEUSTEST_SSH_USER=$LAB_USER"
  echo "THESEUSTEST_SSH_TCSH_USER=$LAB_TCSH_USER"
  echo "THESEUSTEST_SSH_FISH_USER=$LAB_FISH_USER"
  echo "THESEUSTEST_SSH_KEY=$LAB/ssh/client_key"
  echo "THESEUSTEST_SSH_KNOWN_HOSTS=$LAB/known_hosts"
}

stop() {
  resolve_lab_dir
  kill_pidfiles "$LAB/ssh/sshd.pidfile"
  rm -f "$LAB/ssh/known_hosts.line"
  [[ -f $LAB/known_hosts ]] && write_known_hosts
  log "sshd stopped"
}

status() {
  resolve_lab_dir
  if pid_alive "$LAB/ssh/sshd.pidfile"; then
    echo "sshd: running (pid $(cut -d' ' -f1 "$LAB/ssh/sshd.pidfile"), 127.0.0.1:$(cat "$LAB/ssh/port"))"
  else
    echo "sshd: stopped"
    return 1
  fi
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) env_out ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac

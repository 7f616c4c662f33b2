#!/usr/bin/env bash
# lab.sh: the whole test lab for the SSH and Slurm backends; what `cargo xtask lab up|down|status`
# and `cargo xtask test` run.
#
#   ci/lab/lab.sh start|stop|status|env
#
# start: installs missing packages (apt-get, as root), starts sshd-lab.sh and slurm-lab.sh,
# makes the remote Python (a venv with JAX on Debian's /usr/bin/python3 under $LAB/venv, which
# the test user can run, unlike a pyenv Python under /root), then prints the env contract as
# KEY=VALUE lines on stdout and writes them to $LAB/env. Idempotent: when everything already
# runs it only prints the env. stop: stops what start started (by pidfile), keeps packages, the
# test user and the venv.
#
# Environment: THESEUS_LAB_DIR, THESEUS_LAB_USER, THESEUS_LAB_SSH_PORT,
# THESEUS_LAB_SLURM_SSH_PORT (see the other scripts), THESEUS_LAB_JAX (pip requirement for the
# remote venv, default jax==0.10.2; `cargo xtask` passes its own pin).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

JAX_REQ=${THESEUS_LAB_JAX:-jax==0.10.2}

start() {
  require_root
  ensure_packages
  resolve_lab_dir
  local out
  out=$("$LAB_SCRIPTS/sshd-lab.sh" start)
  out+=$'\n'$("$LAB_SCRIPTS/slurm-lab.sh" start)
  ensure_remote_python
  {
    printf '%s\n' "$out" | sort -u
    echo "THESEUSTEST_REMOTE_PYTHON=$LAB/venv/bin/python"
  } > "$LAB/env.tmp"
  mv "$LAB/env.tmp" "$LAB/env"
  cat "$LAB/env"
}

# A venv that the test user can run (inside Slurm jobs too): Debian's python3, root-owned,
# world-readable, bytecode compiled at install time. Rebuilt only when the pin changes.
ensure_remote_python() {
  local venv=$LAB/venv
  if [[ -x $venv/bin/python && $(cat "$venv/.theseus-complete" 2>/dev/null) == "$JAX_REQ" ]]; then
    return 0
  fi
  log "creating $venv with $JAX_REQ (Debian python3, for the test user)"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv" || die "cannot create $venv with /usr/bin/python3 -m venv"
  # JAX_REQ is a space-separated list of pinned requirements (ours): split on purpose.
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $JAX_REQ >&2 \
    || die "pip install $JAX_REQ into $venv failed"
  chmod -R a+rX "$venv"
  su -s /bin/sh "$LAB_USER" -c "$venv/bin/python -c 'import jax'" \
    || die "$LAB_USER cannot import jax from $venv"
  echo "$JAX_REQ" > "$venv/.theseus-complete"
}

stop() {
  resolve_lab_dir
  local rc=0
  # Slurm first: its login node's sessions belong to the same test user.
  "$LAB_SCRIPTS/slurm-lab.sh" stop || rc=1
  "$LAB_SCRIPTS/sshd-lab.sh" stop || rc=1
  rm -f "$LAB/env"
  return $rc
}

status() {
  local rc=0
  "$LAB_SCRIPTS/sshd-lab.sh" status || rc=1
  "$LAB_SCRIPTS/slurm-lab.sh" status || rc=1
  return $rc
}

env_out() {
  resolve_lab_dir
  [[ -f $LAB/env ]] || die "the lab is not running (no $LAB/env); run \`cargo xtask lab up\`"
  cat "$LAB/env"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) env_out ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac

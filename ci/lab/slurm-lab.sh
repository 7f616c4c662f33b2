#!/usr/bin/env bash
# slurm-lab.sh: a real Slurm 22.05 cluster (Debian slurm-wlm + munge) on this machine for the
# Slurm backend tests, reachable only through an SSH "login node" on 127.0.0.1.
#
#   ci/lab/slurm-lab.sh start|stop|status|env
#
# Layout (all under $LAB/slurm): munged, slurmctld and two slurmd ("node1", "node2", both
# 127.0.0.1) run in a private network namespace that has only `lo`, because Slurm 22.05 daemons
# always bind 0.0.0.0. Each node advertises gpu:h100:4 backed by placeholder device nodes.
# Partitions: gpu (default), cpu and urgent, all over the two nodes: a shared site that preempts
# (see write_slurm_config): the other team's `urgent` jobs requeue the test user's `gpu` jobs. The login node is an sshd inside
# the namespace on its 127.0.0.1:22, bridged by socat to 127.0.0.1:PORT on the host; sshd's
# SetEnv gives every session SLURM_CONF. The login sshd also has a PID namespace (and /proc) of
# its own, so what runs on the login node cannot see the jobs' processes on the nodes. No accounting (slurmdbd): `sacct` fails, on purpose.
#
# As dirty as real sites, permanently (see ci/lab/README.md): the login node's `sbatch` (first on
# its PATH, /usr/local/bin) is a site wrapper that prints lines before and after the real
# sbatch's answer, on stdout and stderr; sessions there have SQUEUE_FORMAT, SQUEUE_FORMAT2,
# SINFO_FORMAT, SACCT_FORMAT and SLURM_TIME_FORMAT=relative set; and /scratch is node-local:
# node1, node2 and the login node each run in a mount namespace of their own with a dir of
# their own bind-mounted on /scratch ($LAB/slurm/scratch/NODE).
#
# Environment: THESEUS_LAB_DIR (see lib.sh), THESEUS_LAB_SLURM_SSH_PORT (default: a free port),
# THESEUS_LAB_USER. `start` and `env` print KEY=VALUE lines on stdout. Root tests can use the
# client wrappers in $LAB/slurm/bin (nsenter into the namespace + SLURM_CONF).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NODES=(node1 node2)
GPU_TYPE=h100
GPUS_PER_NODE=4
PARTITIONS=gpu,cpu,urgent
SLURMD_PORT_BASE=17001

setup_paths() {
  resolve_lab_dir
  S=$LAB/slurm
  CONF=$S/etc/slurm.conf
  NS=(nsenter "--net=/run/netns/$NETNS")
}

start() {
  require_root
  ensure_packages
  setup_paths
  if running && ssh_test "$(cat "$S/login/port")" true 2>/dev/null; then
    log "slurm already running (netns $NETNS)"
    env_out
    return 0
  fi
  stop_quietly
  ensure_test_user
  ensure_client_key
  mkdir -p "$S"/{etc,log,run,munge,fakedev,login,bin} "$LAB/shared"
  # /scratch is node-local: the host has only the (empty) mount point, and each node and the
  # login node bind their own dir on it.
  mkdir -p /scratch "$S/scratch"/{node1,node2,login}
  chmod 1777 "$S/scratch"/{node1,node2,login}
  # A fresh controller state: a stale one from an unclean stop would bring back dead jobs.
  rm -rf "$S/state" "$S/spool"
  mkdir -p "$S/state" "$S/spool"
  chmod 755 "$S" "$S/munge"   # jobs and clients of any uid reach the munge socket
  chown "$LAB_USER:" "$LAB/shared"
  chmod 775 "$LAB/shared"

  if [[ -e /run/netns/$NETNS ]]; then ip netns del "$NETNS"; fi
  ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  # glibc's getaddrinfo(AI_ADDRCONFIG) finds nothing while 127.0.0.1 is the only IPv4 address,
  # and Slurm then cannot resolve "127.0.0.1"; a second loopback address fixes that.
  ip -n "$NETNS" addr add 127.0.0.2/8 dev lo

  [[ -f $S/munge/munge.key ]] || mungekey -c -k "$S/munge/munge.key" -b 1024
  rm -f "$S/munge/munge.socket" "$S/munge/munge.socket.lock"
  write_slurm_config
  write_wrappers

  local m=$S/munge
  # Processes are started with `nsenter --net`, never `ip netns exec`: the latter remounts /sys,
  # hiding /sys/fs/cgroup, and slurmd 22.05 refuses to start without it.
  spawn "$S/run/munged.pidfile" "$m/munge.key" "$S/log/munged.out" "${NS[@]}" munged -F --force \
    --key-file="$m/munge.key" --socket="$m/munge.socket" --pid-file="$m/munged.pid" \
    --log-file="$m/munged.log" --seed-file="$m/munged.seed"
  for _ in $(seq 1 50); do [[ -S $m/munge.socket ]] && break; sleep 0.1; done
  [[ -S $m/munge.socket ]] || die "munged did not start: $(cat "$S/log/munged.out" "$m/munged.log" 2>/dev/null)"

  spawn "$S/run/slurmctld.pidfile" "$CONF" "$S/log/slurmctld.out" "${NS[@]}" slurmctld -D -f "$CONF"
  local n
  for n in "${NODES[@]}"; do
    # A mount namespace per node: its slurmd (and so its jobs) sees its own /scratch.
    spawn "$S/run/slurmd-$n.pidfile" "$CONF" "$S/log/slurmd-$n.out" "${NS[@]}" \
      unshare --mount --propagation private sh -c 'mount --bind "$1" /scratch && exec slurmd -D -N "$2" -f "$3"' \
      sh "$S/scratch/$n" "$n" "$CONF"
  done
  local t0=$SECONDS states
  while true; do
    states=$("$S/bin/sinfo" -h -N -o '%t' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    [[ $states == "idle " ]] && break
    if (( SECONDS - t0 > 30 )); then
      tail -n 5 "$S"/log/*.out "$S"/log/*.log >&2 || true
      stop_quietly
      die "slurm nodes not idle after 30 s (states: ${states:-none}); logs in $S/log"
    fi
    sleep 0.2
  done

  start_login_node
  log "slurm up: ${NODES[*]} idle after $((SECONDS - t0)) s; login node 127.0.0.1:$(cat "$S/login/port")"
  env_out
}

write_slurm_config() {
  cat > "$CONF" <<CONF
# Generated by ci/lab/slurm-lab.sh: ${#NODES[@]} fake GPU nodes on one machine, no accounting.
ClusterName=theseus-lab
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire (120 s by default) is also how long a requeued job must wait before it may start
# again (Reason=BeginTime); 30 s keeps the preemption tests short and still leaves a loaded
# machine time to launch a step with its credential.
AuthInfo=socket=$S/munge/munge.socket,cred_expire=30
SlurmctldPort=6817
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
SchedulerType=sched/backfill
# Without these a new job can sit in PENDING for about 2 s.
# A requeued job whose BeginTime passed starts at the next scheduler pass, not on an event:
# sched_interval and bf_interval (60 s and 30 s by default) bound that wait.
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
GresTypes=gpu
# A shared site that preempts, as multi-team sites without slurmdbd run it (QOS-based preemption,
# preempt/qos, needs QOS records, which live in the accounting database this lab does not
# have): overlapping partitions with PriorityTier, like Stanford Sherlock's \`owners\` or Harvard
# FASRC's \`serial_requeue\`. A pending job of the higher tier (\`urgent\`, the other team's)
# requeues running jobs of the lower tier (\`gpu\`) on the nodes it needs; \`cpu\` and \`urgent\`
# jobs are never preempted. The preempted job's steps get SIGTERM at once and keep running for
# the partition's GraceTime (10 s, time to write a checkpoint); then Slurm requeues the job (TERM
# to all, SIGKILL KillWait seconds later). A job that ends within its grace is recorded FAILED
# (or COMPLETED), not requeued: the bootstrap waits. A requeued job waits until it fits again and
# starts over with SLURM_RESTART_COUNT set. A job that is not requeue-able is cancelled instead, and
# JobRequeue=0, as at many sites (a node failure must not re-run a job that did not ask):
# only \`sbatch --requeue\` jobs come back.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=0
CONF
  : > "$S/etc/gres.conf"
  local i=0 n first last
  for n in "${NODES[@]}"; do
    echo "NodeName=$n NodeAddr=127.0.0.1 Port=$((SLURMD_PORT_BASE + i)) CPUs=$(nproc) RealMemory=4000 Gres=gpu:$GPU_TYPE:$GPUS_PER_NODE State=UNKNOWN" >> "$CONF"
    first=$((i * GPUS_PER_NODE))
    last=$((first + GPUS_PER_NODE - 1))
    # Slurm 22.05 drops GPUs without File= ("Removing file-less GPU"), so each node gets its own
    # placeholder device nodes (char 195:N, like /dev/nvidiaN). Nothing opens them.
    echo "NodeName=$n Name=gpu Type=$GPU_TYPE File=$S/fakedev/nvidia[$first-$last]" >> "$S/etc/gres.conf"
    mkdir -p "$S/spool/$n"
    i=$((i + 1))
  done
  local k nodelist
  nodelist=$(IFS=,; echo "${NODES[*]}")
  echo "PartitionName=gpu Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=10" >> "$CONF"
  echo "PartitionName=cpu Nodes=$nodelist MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF" >> "$CONF"
  # The other team's partition: only its group may submit there.
  echo "PartitionName=urgent Nodes=$nodelist MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF AllowGroups=$LAB_OTHER_USER,root" >> "$CONF"
  for ((k = 0; k < ${#NODES[@]} * GPUS_PER_NODE; k++)); do
    [[ -e $S/fakedev/nvidia$k ]] && continue
    mknod "$S/fakedev/nvidia$k" c 195 "$k" 2>/dev/null || : > "$S/fakedev/nvidia$k"
  done
}

# Client wrappers for root on the host: each enters the namespace with SLURM_CONF set.
write_wrappers() {
  local cmd
  for cmd in sbatch squeue sinfo scancel srun salloc scontrol sacct sstat; do
    printf '#!/bin/sh\nSLURM_CONF=%s exec nsenter --net=/run/netns/%s /usr/bin/%s "$@"\n' \
      "$CONF" "$NETNS" "$cmd" > "$S/bin/$cmd"
    chmod 755 "$S/bin/$cmd"
  done
}

start_login_node() {
  local d=$S/login port=${THESEUS_LAB_SLURM_SSH_PORT:-$(free_port)}
  echo "$port" > "$d/port"
  write_site_wrapper
  # Formats a site (or a user) sets in the login environment, each breaking a parser that does
  # not name its own format (sshd's SetEnv, so that every session has them).
  # sshd takes the first SetEnv line only, so all of them go on one.
  write_sshd_config "$d/sshd_config" "$d" 22 "SLURM_CONF=$CONF \
\"SQUEUE_FORMAT=%.18i %.9P %.30j %.8u %.2t %.10M %.6D %R\" \"SQUEUE_FORMAT2=JobID:12,State:10,Reason:20\" \
\"SINFO_FORMAT=%20P %5a %.10l %16F %N\" \"SACCT_FORMAT=JobID%20,JobName,Elapsed,State,ExitCode\" \
SLURM_TIME_FORMAT=relative"
  echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$d/host_ed25519.pub")" > "$d/known_hosts.line"
  write_known_hosts
  # The login node must not see the nodes' processes, as on a real cluster where they are other
  # machines: its sshd runs in a PID namespace of its own with its own /proc (the Slurm clients
  # still reach slurmctld through the network namespace and munged through its socket).
  # `--kill-child` takes the namespace down with the recorded `unshare` process.
  # Its mount namespace (private) has the site's /usr/local/bin and its own /scratch.
  spawn "$d/sshd.pidfile" "$d/sshd_config" "$d/sshd.log" "${NS[@]}" \
    unshare --pid --fork --mount-proc --kill-child sh -c \
    'mount --bind "$1" /usr/local/bin && mount --bind "$2" /scratch && exec /usr/sbin/sshd -D -e -f "$3"' \
    sh "$d/usr-local-bin" "$S/scratch/login" "$d/sshd_config"
  # One socat per connection: the listener on the host forks, and each child enters the
  # namespace and connects to the login sshd there.
  spawn "$d/socat.pidfile" "TCP4-LISTEN:$port," "$d/socat.log" socat \
    "TCP4-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" \
    "EXEC:nsenter --net=/run/netns/$NETNS socat STDIO TCP4\\:127.0.0.1\\:22"
  wait_ssh "$port" "$d/sshd.log"
}

# The login node's /usr/local/bin: the host's, plus a site's `sbatch` wrapper (like the
# accounting and quota wrappers of real sites) that prints lines before and after the real
# sbatch's answer on stdout and stderr, a bare number among them, and keeps its exit code.
write_site_wrapper() {
  local d=$S/login/usr-local-bin f
  rm -rf "$d"
  mkdir -p "$d"
  for f in /usr/local/bin/*; do
    [[ -e $f ]] && ln -s "$f" "$d/${f##*/}"
  done
  cat > "$d/sbatch" <<'WRAPPER'
#!/bin/sh
# Site wrapper (theseus lab): quota and accounting notices around the real sbatch. Like some
# sites' wrappers it can also hide sbatch's answer or fail after submitting; tests ask for that
# per job with THESEUS_LAB_SBATCH=swallow|fail-after in sbatch's environment.
echo "=== Theseus Lab HPC: checking quota for $(id -un) ==="
echo "sbatch: site: jobs over 24h are not backed up" >&2
echo "3"
case ${THESEUS_LAB_SBATCH:-} in
  swallow) /usr/bin/sbatch "$@" > /dev/null; rc=$?; echo "Your job has been submitted." ;;
  *) /usr/bin/sbatch "$@"; rc=$? ;;
esac
echo "sbatch: site: 1000 core-hours left on account default" >&2
echo "Charged to account default; remaining allocation: 1000"
echo "7"
if [ "${THESEUS_LAB_SBATCH:-}" = fail-after ]; then echo "sbatch: site: accounting post-hook failed" >&2; exit 1; fi
exit $rc
WRAPPER
  chmod 755 "$d/sbatch"
}

running() {
  local f
  for f in "$S/run/munged.pidfile" "$S/run/slurmctld.pidfile" "$S"/run/slurmd-node{1,2}.pidfile \
    "$S/login/sshd.pidfile" "$S/login/socat.pidfile"; do
    pid_alive "$f" || return 1
  done
}

env_out() {
  setup_paths
  [[ -f $S/login/port ]] || die "the slurm lab was never started in $LAB"
  echo "THESEUSTEST_LAB_DIR=$LAB"
  echo "THESEUSTEST_SLURM_SSH_HOST=127.0.0.1"
  echo "THESEUSTEST_SLURM_SSH_PORT=$(cat "$S/login/port")"
  echo "THESEUSTEST_SLURM_SSH_USER=$LAB_USER"
  echo "THESEUSTEST_SLURM_OTHER_USER=$LAB_OTHER_USER"
  echo "THESEUSTEST_SLURM_CONF=$CONF"
  echo "THESEUSTEST_SLURM_SHARED=$LAB/shared"
  echo "THESEUSTEST_SLURM_NODE_LOCAL=/scratch"
  echo "THESEUSTEST_SLURM_NODE_LOCAL_DIRS=$S/scratch"
  echo "THESEUSTEST_SLURM_PARTITIONS=$PARTITIONS"
  echo "THESEUSTEST_SLURM_NODES=$(IFS=,; echo "${NODES[*]}")"
  echo "THESEUSTEST_SLURM_GRES=gpu:$GPU_TYPE:$GPUS_PER_NODE"
}

# Cancels the jobs (their slurmstepd would outlive slurmd), stops the daemons by pidfile and
# removes the namespace. Safe after an unclean stop: stale pidfiles are ignored.
stop_quietly() {
  if pid_alive "$S/run/slurmctld.pidfile" && [[ -x $S/bin/squeue ]]; then
    local ids
    ids=$("$S/bin/squeue" -h -o %i 2>/dev/null || true)
    if [[ -n $ids ]]; then
      # shellcheck disable=SC2086
      "$S/bin/scancel" $ids 2>/dev/null || true
      for _ in $(seq 1 100); do
        [[ -z $("$S/bin/squeue" -h -o %i 2>/dev/null) ]] && break
        sleep 0.1
      done
    fi
  fi
  # The login node's `unshare --fork` ignores SIGTERM (it would wait for the 10 s SIGKILL): its
  # child, the sshd, gets the TERM, and unshare exits with it.
  if pid_alive "$S/login/sshd.pidfile"; then
    local pid _m c
    read -r pid _m < "$S/login/sshd.pidfile"
    for c in $(cat "/proc/$pid/task/"*/children 2>/dev/null); do kill "$c" 2>/dev/null || true; done
  fi
  # Each daemon takes about 2 s to react to SIGTERM, so they stop in parallel; munged goes last
  # because the others talk to it while shutting down.
  kill_pidfiles "$S/login/socat.pidfile" "$S/login/sshd.pidfile" "$S/run/slurmctld.pidfile" \
    "$S"/run/slurmd-*.pidfile
  kill_pidfiles "$S/run/munged.pidfile"
  rm -f "$S/login/known_hosts.line"
  [[ -f $LAB/known_hosts ]] && write_known_hosts
  if [[ -e /run/netns/$NETNS ]]; then ip netns del "$NETNS" || true; fi
}

stop() {
  setup_paths
  stop_quietly
  log "slurm stopped"
}

status() {
  setup_paths
  local f rc=0
  for f in "$S"/run/*.pidfile "$S"/login/*.pidfile; do
    [[ -f $f ]] || continue
    if pid_alive "$f"; then echo "$(basename "$f" .pidfile): running (pid $(cut -d' ' -f1 "$f"))"
    else echo "$(basename "$f" .pidfile): dead"; rc=1; fi
  done
  [[ -f $S/run/slurmctld.pidfile ]] || { echo "slurm: stopped"; return 1; }
  "$S/bin/sinfo" -N -O 'NodeList,Partition,StateCompact,CPUsState,Gres,GresUsed' || rc=1
  return $rc
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) env_out ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# smoke.sh: proves a running lab works, as the tests will use it (`cargo xtask lab smoke`).
#
# As the test user over SSH: a command on the plain sshd; on the Slurm login node `sinfo`, a
# 2-node `srun hostname` batch job with one GPU per node, and a 2-node JAX job (one process per
# node) whose processes meet through jax.distributed.initialize and print process_count=2. And
# the site traits: the login node's `sbatch` is the site wrapper (lines around the id), its
# sessions carry the site's formats, and /scratch is node-local (the 2-node job writes a file
# there on each node; the login node and the other node do not see it). The jobs here use the
# real `/usr/bin/sbatch`, whose answer is the bare id.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
resolve_lab_dir
[[ -f $LAB/env ]] || die "the lab is not running; run \`cargo xtask lab up\`"
# shellcheck disable=SC1091
set -a; source "$LAB/env"; set +a

login() { ssh_test "$THESEUSTEST_SLURM_SSH_PORT" "$@"; }

# wait_job ID: waits up to 120 s for the job to leave the queue; prints its final state.
wait_job() {
  local state
  for _ in $(seq 1 600); do
    state=$(login "scontrol show job $1 -o" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case $state in PENDING|RUNNING|CONFIGURING|COMPLETING) sleep 0.2 ;; *) echo "$state"; return 0 ;; esac
  done
  die "job $1 still $state after 120 s"
}

out=$(ssh_test "$THESEUSTEST_SSH_PORT" 'echo ok')
[[ $out == ok ]] || die "plain sshd: expected ok, got: $out"
echo "ssh: ok"

sinfo=$(login 'sinfo -h -N -o "%N %G %t" | sort -u')
echo "sinfo: $(echo "$sinfo" | tr '\n' ';')"
[[ $(grep -c ' gpu:h100:4 idle$' <<< "$sinfo") -eq 2 ]] || die "expected 2 idle nodes with gpu:h100:4"

site=$(login 'command -v sbatch; printf "%s\n" "$SQUEUE_FORMAT" "$SLURM_TIME_FORMAT"; sbatch --parsable -p cpu --mem=100M -o /dev/null --wrap true 2>&1')
[[ $(head -n1 <<< "$site") == /usr/local/bin/sbatch && $site == *"=== Theseus Lab HPC"*"core-hours left"* \
  && $(sed -n 3p <<< "$site") == relative ]] || die "the login node lacks the site traits: $site"
echo "site: sbatch wrapper and formats: ok"

t0=$SECONDS
job=$(login "cd $THESEUSTEST_SLURM_SHARED && /usr/bin/sbatch --parsable --nodes=2 --ntasks-per-node=1 --gres=gpu:h100:1 -o hostname-%j.out --wrap 'srun -l sh -c \"printenv SLURMD_NODENAME > /scratch/smoke-\\\$SLURM_JOB_ID; printenv SLURMD_NODENAME\"'")
state=$(wait_job "$job")
[[ $state == COMPLETED ]] || die "srun job $job ended $state: $(cat "$THESEUSTEST_SLURM_SHARED/hostname-$job.out")"
echo "srun job $job: $state in $((SECONDS - t0)) s: $(sort "$THESEUSTEST_SLURM_SHARED/hostname-$job.out" | tr '\n' ' ')"
local_dirs=$THESEUSTEST_SLURM_NODE_LOCAL_DIRS
[[ $(cat "$local_dirs/node1/smoke-$job") == node1 && $(cat "$local_dirs/node2/smoke-$job") == node2 ]] \
  && ! login "test -e /scratch/smoke-$job" || die "/scratch is not node-local: $(ls "$local_dirs"/*)"
rm -f "$local_dirs"/node*/smoke-"$job"
echo "node-local /scratch: ok"

t0=$SECONDS
job=$(login "cd $THESEUSTEST_SLURM_SHARED && /usr/bin/sbatch --parsable" <<JOB
#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --gres=gpu:h100:1 --time=5 -o jax-%j.out
# The fake node names do not resolve: the coordinator is the first node's NodeAddr.
first=\$(scontrol show hostnames "\$SLURM_JOB_NODELIST" | head -n1)
addr=\$(scontrol show node "\$first" -o | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
export COORD=\$addr:\$((20000 + SLURM_JOB_ID % 10000)) JAX_PLATFORMS=cpu
srun $THESEUSTEST_REMOTE_PYTHON -c '
import os, jax
coord = os.environ["COORD"]
jax.distributed.initialize(coordinator_address=coord, coordinator_bind_address=coord,
    num_processes=int(os.environ["SLURM_NTASKS"]), process_id=int(os.environ["SLURM_PROCID"]),
    initialization_timeout=60)
print(os.environ["SLURMD_NODENAME"], f"process_index={jax.process_index()}",
      f"process_count={jax.process_count()}", flush=True)
jax.distributed.shutdown()
'
JOB
)
state=$(wait_job "$job")
out=$THESEUSTEST_SLURM_SHARED/jax-$job.out
[[ $state == COMPLETED ]] || die "jax job $job ended $state: $(cat "$out")"
[[ $(grep -c 'process_count=2' "$out") -eq 2 ]] || die "jax job $job: expected 2 lines with process_count=2: $(cat "$out")"
echo "jax job $job: $state in $((SECONDS - t0)) s: $(sort "$out" | tr '\n' ' ')"

#!/usr/bin/env bash
# record-slurm.sh OUT_DIR [preempt|preempt-grace]: records real Slurm output from a running lab (as the test
# user, through the login node, as the backend sees it) into OUT_DIR, for the parser tests in
# crates/backend-slurm. Scenario: job 1 runs on both nodes with one GPU each, job 2 waits for
# GPUs (needs 4 per node), job 3 failed with exit code 3, job 4 completed, job 5 was cancelled.
# Start from a fresh lab (`cargo xtask lab down && cargo xtask lab up`) so the job ids match.
#
# With `preempt`, only the preemption scenario (files `preempt_*`, any lab state; the job ids
# are in `preempt_ids.txt`): the test user's requeue-able job R (gpu, node1, 4 GPUs) and
# non-requeue-able job N (gpu, node2, 4 GPUs) run; the other team's job P (urgent, both nodes,
# 4 GPUs each) preempts both; R is requeued, N ends PREEMPTED; recorded while R waits, and
# again once P ended and R runs its second attempt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=${1:?usage: record-slurm.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
resolve_lab_dir
set -a; source "$LAB/env"; set +a
# Without the login node's site formats (SQUEUE_FORMAT, ...), as the backend runs its queries;
# sbatch is the site wrapper, whose lines the recorded rejections keep.
login() { ssh_test "$THESEUSTEST_SLURM_SSH_PORT" "unset SQUEUE_FORMAT SQUEUE_FORMAT2 SINFO_FORMAT SACCT_FORMAT SLURM_TIME_FORMAT; $*"; }
# rec FILE CMD: the command's stdout and stderr, then its exit status, as the backend gets them.
rec() {
  local file=$1 rc=0
  shift
  login "$*" > "$out/$file" 2> "$out/$file.stderr" || rc=$?
  # The users' ~/.bashrc talks on stderr too (lib.sh): not the command's.
  sed -i '/^bashrc: quota notice/d' "$out/$file.stderr"
  [[ -s $out/$file.stderr ]] || rm "$out/$file.stderr"
  echo "$rc" > "$out/$file.exit"
  echo "$file: exit $rc" >&2
}
in_shared="cd $THESEUSTEST_SLURM_SHARED &&"

# wait_for WHAT CMD PATTERN: up to 180 s until CMD's output matches PATTERN (a glob).
wait_for() {
  local what=$1 cmd=$2 pattern=$3 got=""
  for _ in $(seq 1 900); do
    got=$(login "$cmd")
    # shellcheck disable=SC2053
    [[ $got == $pattern ]] && return 0
    sleep 0.2
  done
  echo "timed out waiting for $what: $got" >&2
  exit 1
}

if [[ ${2:-} == preempt ]]; then
  job='trap "echo TERM; exit 143" TERM; echo "attempt ${SLURM_RESTART_COUNT:-0}"; for i in $(seq 1 300); do sleep 1; done'
  submit="$in_shared /usr/bin/sbatch --parsable -p gpu --gres=gpu:h100:4 --mem=300M"
  r=$(login "$submit --requeue -w node1 -J requeued -o rec-%j.out --wrap '$job'")
  n=$(login "$submit -w node2 -J not-requeued -o rec-%j.out --wrap '$job'")
  wait_for "R and N to run" "squeue -h -o %T -j $r,$n | sort -u" RUNNING
  p=$(LAB_SSH_AS=$THESEUSTEST_SLURM_OTHER_USER login "cd /tmp && /usr/bin/sbatch --parsable -p urgent -N2 --gres=gpu:h100:4 --mem=300M -J preemptor -o /dev/null --wrap 'sleep 20'")
  echo "requeued=$r not_requeued=$n preemptor=$p" > "$out/preempt_ids.txt"
  wait_for "R to be requeued" "squeue -h --states=all -o '%T %r' -j $r" "PENDING *"
  wait_for "N to end PREEMPTED" "squeue -h --states=all -o %T -j $n" PREEMPTED
  rec preempt_squeue_requeued.json "squeue --json --states=all --jobs $r"
  rec preempt_scontrol_requeued.txt "scontrol show job -o $r"
  rec preempt_scontrol_not_requeued.txt "scontrol show job -o $n"
  rec preempt_log_not_requeued.txt "cat $THESEUSTEST_SLURM_SHARED/rec-$n.out"
  wait_for "R's second attempt" "squeue -h -o %T -j $r" RUNNING
  rec preempt_squeue_second_attempt.json "squeue --json --states=all --jobs $r"
  rec preempt_scontrol_second_attempt.txt "scontrol show job -o $r"
  rec preempt_log_requeued.txt "cat $THESEUSTEST_SLURM_SHARED/rec-$r.out"
  login "scancel $r" || true
  exit 0
fi

# With `preempt-grace`, the same on `gpu` with its GraceTime (files `grace_*`, ids in
# `grace_ids.txt`): G (node1) keeps running after its TERM, as theseus's bootstrap does; E
# (node2) exits 143 on its TERM. Recorded within the grace, and after it.
if [[ ${2:-} == preempt-grace ]]; then
  # Within the grace Slurm signals the job's steps only, not the batch shell: the work runs
  # in an srun step, as theseus's batch script does.
  for mode in hold exit; do
    cat > "$THESEUSTEST_SLURM_SHARED/rec-grace-$mode.sh" <<SCRIPT
#!/bin/bash
echo "attempt \${SLURM_RESTART_COUNT:-0}"
exec srun bash -c 'trap "echo step TERM; [ $mode = exit ] && exit 143" TERM; for i in \$(seq 1 300); do sleep 1; done'
SCRIPT
    chmod 644 "$THESEUSTEST_SLURM_SHARED/rec-grace-$mode.sh"
  done
  submit="$in_shared /usr/bin/sbatch --parsable -p gpu --gres=gpu:h100:4 --mem=300M --requeue --open-mode=append"
  g=$(login "$submit -w node1 -J holds -o rec-%j.out rec-grace-hold.sh")
  e=$(login "$submit -w node2 -J exits -o rec-%j.out rec-grace-exit.sh")
  wait_for "G and E to run" "squeue -h -o %T -j $g,$e | sort -u" RUNNING
  p=$(LAB_SSH_AS=$THESEUSTEST_SLURM_OTHER_USER login "cd /tmp && /usr/bin/sbatch --parsable -p urgent -N2 --gres=gpu:h100:4 --mem=300M -J preemptor -o /dev/null --wrap 'sleep 20'")
  echo "holds=$g exits=$e preemptor=$p" > "$out/grace_ids.txt"
  wait_for "E to fail" "squeue -h --states=all -o %T -j $e" FAILED
  rec grace_squeue_within.json "squeue --json --states=all --jobs $g"
  rec grace_scontrol_within.txt "scontrol show job -o $g"
  rec grace_scontrol_exited.txt "scontrol show job -o $e"
  rec grace_scontrol_partition.txt "scontrol show partition gpu -o"
  wait_for "G to be requeued" "squeue -h --states=all -o '%T %r' -j $g" "PENDING *"
  rec grace_squeue_requeued.json "squeue --json --states=all --jobs $g"
  rec grace_log_holds.txt "cat $THESEUSTEST_SLURM_SHARED/rec-$g.out"
  rec grace_log_exits.txt "cat $THESEUSTEST_SLURM_SHARED/rec-$e.out"
  login "scancel $g" || true
  exit 0
fi
login "$in_shared sbatch --parsable -J running --nodes=2 --ntasks-per-node=1 --gres=gpu:h100:1 -o rec-%j.out --wrap 'srun sleep 60'"
login "$in_shared sbatch --parsable -J pending --nodes=2 --gres=gpu:h100:4 -o rec-%j.out --wrap true"
login "$in_shared sbatch --parsable -J failing -p cpu -o rec-%j.out --wrap 'exit 3'"
login "$in_shared sbatch --parsable -J ok -p cpu -o rec-%j.out --wrap 'echo ok'"
login "$in_shared sbatch --parsable -J cancelled --gres=gpu:h100:4 --nodes=2 -o rec-%j.out --wrap true"
login "scancel 5"
# Wait until 1 runs and 3 and 4 are done.
for _ in $(seq 1 100); do
  states=$(login "squeue -h --states=all -o '%i %T' | sort | tr '\n' ' '")
  [[ $states == *"1 RUNNING"*"3 FAILED"*"4 COMPLETED"* ]] && break
  sleep 0.2
done
echo "states: $states" >&2
rec sinfo_node_format.txt "sinfo --Node --noheader --Format='NodeList:|,Partition:|,Gres:|,GresUsed:|,StateCompact:'"
rec sinfo_default.txt "sinfo"
rec sinfo.json "sinfo --json"
rec squeue_all.json "squeue --json --states=all"
rec squeue_job1.json "squeue --json --states=all --jobs 1"
rec squeue_text.txt "squeue --noheader --states=all --format='%i|%T|%r|%N'"
rec squeue_text_job3.txt "squeue --noheader --states=all --format='%i|%T|%r|%N' --jobs 3"
rec squeue_unknown_job.txt "squeue --noheader --states=all --format='%i|%T|%r|%N' --jobs 999"
rec squeue_unknown_job.json "squeue --json --states=all --jobs 999"
rec sacct_job3.txt "sacct --parsable2 --noheader --format=JobID,State,ExitCode,Reason --jobs 3"
rec scontrol_show_node.txt "scontrol show node"
rec scontrol_show_job_oneliner.txt "scontrol show job -o"
rec sbatch_bad_partition.txt "sbatch --parsable -p nosuch --wrap true"
rec sbatch_bad_gres.txt "sbatch --parsable --gres=gpu:h100:5 --wrap true"
rec sbatch_bad_gpu_type.txt "sbatch --parsable --gres=gpu:a100:1 --wrap true"
rec sinfo_version.txt "sinfo --version"
login "scancel 1 2" || true

# preempt-hold.sh (theseus, shipped next to the bootstrap of Slurm jobs; the bootstrap runs it
# with bash on a signal, named by THESEUS_PREEMPT_HOLD): when the TERM is a preemption that Slurm
# ends itself once the partition's GraceTime is over (the job still RUNNING, or SIGNALING, with
# a PreemptTime), prints the seconds until Slurm's KILL, GraceTime + KillWait; nothing for a
# cancel, a time limit, or a preemption without grace (then the job is requeued or cancelled at
# once). Seen on the lab (Slurm 22.05): with GraceTime the steps get TERM at once, the batch shell
# nothing, and a job that ends within the grace is recorded FAILED (or COMPLETED), not requeued.
# Why not, on stderr (one line, which the bootstrap logs).
[[ -n "${SLURM_JOB_ID:-}" ]] && command -v scontrol > /dev/null 2>&1 || { echo "not a Slurm job" >&2; exit 0; }
job=$(env -u SLURM_TIME_FORMAT scontrol show job -o "$SLURM_JOB_ID" 2>&1) || { echo "scontrol: ${job:0:200}" >&2; exit 0; }
state=$(printf '%s\n' "$job" | sed -n 's/.* JobState=\([^ ]*\).*/\1/p' | head -n1)
preempted=$(printf '%s\n' "$job" | sed -n 's/.* PreemptTime=\([^ ]*\).*/\1/p' | head -n1)
# SIGNALING while slurmctld still delivers the TERM (seen on the lab with 2-node jobs).
if [[ ! "$state" =~ ^(RUNNING|SIGNALING)$ || -z "$preempted" || "$preempted" == None ]]; then
  echo "not a preemption with a grace (JobState=${state:-?} PreemptTime=${preempted:-?})" >&2
  exit 0
fi
part=${SLURM_JOB_PARTITION:-}
[[ -n "$part" ]] || { echo "SLURM_JOB_PARTITION is not set" >&2; exit 0; }
grace=$(scontrol show partition "$part" -o 2> /dev/null | sed -n 's/.* GraceTime=\([0-9][0-9]*\).*/\1/p' | head -n1)
[[ "$grace" =~ ^[0-9]+$ ]] && ((10#$grace > 0)) || { echo "preempted without a grace (GraceTime=${grace:-?})" >&2; exit 0; }
kill_wait=${THESEUS_KILL_DEADLINE_SECONDS:-}
[[ "$kill_wait" =~ ^[0-9]+$ ]] || kill_wait=30
echo $((10#$grace + 10#$kill_wait))

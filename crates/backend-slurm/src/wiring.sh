# How the tasks of a Slurm job find their rank (theseus bootstrap, `theseus_wire`): SLURM_PROCID,
# SLURM_NTASKS, SLURM_LOCALID, and the first node of the job's node list.
[[ -n "${SLURM_PROCID:-}" ]] || theseus_die "slurm: SLURM_PROCID is not set (run the bootstrap with srun)"
theseus_rank=$SLURM_PROCID
# A rank's ports are reached from the login node (`theseus forward`, `repl`), not from this node.
export THESEUS_BIND_ADDRESS=${THESEUS_BIND_ADDRESS:-0.0.0.0}
theseus_count=${SLURM_NTASKS:-1}
theseus_local_rank=${SLURM_LOCALID:-0}
theseus_first_host=""
theseus_nodelist=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}
if [[ -n "${THESEUS_COORDINATOR_ADDRESS:-}" ]]; then
  theseus_first_host=override
fi
if [[ -z "$theseus_first_host" && -n "$theseus_nodelist" ]] && command -v scontrol > /dev/null 2>&1; then
  theseus_first_host=$(scontrol show hostnames "$theseus_nodelist" 2> /dev/null | head -n1 || true)
fi
if [[ -z "$theseus_first_host" && -n "$theseus_nodelist" ]]; then
  # Without scontrol: the first name of `a,b` or `prefix[01-04,7],c`.
  theseus_prefix=${theseus_nodelist%%[\[,]*}
  theseus_rest=${theseus_nodelist:${#theseus_prefix}}
  if [[ "$theseus_rest" == \[* ]]; then
    theseus_rest=${theseus_rest#\[}
    theseus_first_host="$theseus_prefix${theseus_rest%%[-,\]]*}"
  else
    theseus_first_host=$theseus_prefix
  fi
fi
if [[ -z "$theseus_first_host" ]]; then
  theseus_first_host=${SLURM_LAUNCH_NODE_IPADDR:-}
fi
[[ -n "$theseus_first_host" ]] || theseus_die "slurm: cannot find the first node (SLURM_JOB_NODELIST is empty)"

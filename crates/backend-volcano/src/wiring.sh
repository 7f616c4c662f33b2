# How the pods of a Volcano job find their rank (theseus bootstrap, `theseus_wire`): the coordinator
# is the job's headless Service that selects rank 0 (its name in THESEUS_VOLCANO_COORDINATOR), the
# process count is THESEUS_VOLCANO_NODES (both rendered with the job), the rank is VC_TASK_INDEX (the
# env plugin's). No host list: Volcano's svc plugin is not enabled (its VC_WORKER_HOSTS outgrows the
# kernel's limit on one environment string past about a thousand pods).
[[ -n "${THESEUS_VOLCANO_COORDINATOR:-}" ]] ||
  theseus_die "volcano: THESEUS_VOLCANO_COORDINATOR is not set (the job's pod template renders it)"
[[ "${THESEUS_VOLCANO_NODES:-}" =~ ^[1-9][0-9]*$ ]] ||
  theseus_die "volcano: THESEUS_VOLCANO_NODES is not a positive count: '${THESEUS_VOLCANO_NODES:-}'"
[[ -n "${VC_TASK_INDEX:-}" ]] || theseus_die "volcano: VC_TASK_INDEX is not set"
theseus_first_host=$THESEUS_VOLCANO_COORDINATOR
theseus_count=$THESEUS_VOLCANO_NODES
theseus_rank=$VC_TASK_INDEX

# How the pods of a Volcano job find their rank (theseus bootstrap, `theseus_wire`): the worker
# hosts from VC_WORKER_HOSTS (else the host file Volcano mounts), the rank from VC_TASK_INDEX.
theseus_hosts=()
theseus_host_file=${THESEUS_VOLCANO_HOST_FILE:-/etc/volcano/worker.host}
if [[ -n "${VC_WORKER_HOSTS:-}" ]]; then
  IFS=',' read -r -a theseus_hosts <<< "$VC_WORKER_HOSTS"
elif [[ -r "$theseus_host_file" ]]; then
  mapfile -t theseus_hosts < "$theseus_host_file"
else
  theseus_die "volcano: neither VC_WORKER_HOSTS nor $theseus_host_file gives the worker hosts"
fi
theseus_first_host=""
theseus_count=0
for theseus_h in ${theseus_hosts[@]+"${theseus_hosts[@]}"}; do
  theseus_h=${theseus_h//[[:space:]]/}
  [[ -n "$theseus_h" ]] || continue
  [[ -n "$theseus_first_host" ]] || theseus_first_host=$theseus_h
  theseus_count=$((theseus_count + 1))
done
[[ -n "$theseus_first_host" ]] || theseus_die "volcano: the worker host list is empty"
[[ -n "${VC_TASK_INDEX:-}" ]] || theseus_die "volcano: VC_TASK_INDEX is not set"
theseus_rank=$VC_TASK_INDEX

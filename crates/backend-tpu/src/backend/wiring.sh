# How the workers of a TPU VM find their rank (theseus bootstrap, `theseus_wire`): from the
# worker's metadata server, where `jax.distributed.initialize()` without arguments looks on a real
# TPU VM: `agent-worker-number` is the rank, and `worker-network-endpoints` (`ID:WORKER:IP,...`,
# in worker order) gives the count and worker 0's address, the coordinator's host.
theseus_tpu_md=${GCE_METADATA_HOST:-metadata.google.internal}
theseus_tpu_attr() {
  local url="http://$theseus_tpu_md/computeMetadata/v1/instance/attributes/$1"
  if command -v curl > /dev/null 2>&1; then
    curl -fsS --max-time 10 -H 'Metadata-Flavor: Google' "$url"
  else
    python3 -c 'import sys, urllib.request as u
r = u.Request(sys.argv[1], headers={"Metadata-Flavor": "Google"})
sys.stdout.write(u.urlopen(r, timeout=10).read().decode())' "$url"
  fi
}
theseus_rank=$(theseus_tpu_attr agent-worker-number) \
  || theseus_die "tpu: cannot read agent-worker-number from the metadata server $theseus_tpu_md (GCE_METADATA_HOST)"
theseus_tpu_endpoints=$(theseus_tpu_attr worker-network-endpoints) \
  || theseus_die "tpu: cannot read worker-network-endpoints from the metadata server $theseus_tpu_md"
IFS=, read -r -a theseus_tpu_list <<< "$theseus_tpu_endpoints"
theseus_count=${#theseus_tpu_list[@]}
((theseus_count > 0)) || theseus_die "tpu: worker-network-endpoints is empty"
theseus_first_host=${theseus_tpu_list[0]##*:}
[[ -n "$theseus_first_host" ]] || theseus_die "tpu: no address for worker 0 in '$theseus_tpu_endpoints'"
theseus_local_rank=0
export THESEUS_TPU_MODE=1 THESEUS_TPU_WORKER=$theseus_rank
# Each worker has its own disk (the simulator: its own home): every worker sets up its own work
# dir, and no rank waits for another worker's files (jax.distributed.initialize is the barrier).
theseus_private_dirs=1

# The body of theseus's TPU worker wrapper (`.theseus/tpu-worker.sh`, the values above it are
# rendered per worker): runs the bootstrap; on worker 0 of a VM theseus created for the job (and
# not kept with `--keep`), then deletes the VM through the Cloud TPU API with the token of the
# VM's own service account (metadata server), once the run's exit code is written and
# `theseus_tpu_delete_after` seconds have passed, so that a client following the job still
# reads its end. The deleter leaves the run's session and marker: it is not the job. The API is
# where gcloud on the VM would look: CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU, else Google's, with
# CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE as an extra CA when set.
# The bootstrap's `resume-base` (the checkpoint marker as the run first found it, in the run
# dir) is what tells a restarted attempt that the latest checkpoint is its own. The run dir is on
# the VM's disk, which a preemption takes: worker 0 keeps a copy beside the checkpoints (shared
# storage when the run is to survive a preemption), and a restart puts it back first.
if [[ ! -f "$theseus_tpu_run_dir/resume-base" && -f "$theseus_tpu_base_copy" ]]; then
  mkdir -p -- "$theseus_tpu_run_dir" && cp -- "$theseus_tpu_base_copy" "$theseus_tpu_run_dir/resume-base" 2> /dev/null || true
fi
# The bootstrap runs as this wrapper's child; worker 0 waits for it to record its resume base
# (it does so before the job starts), copies it, then waits for the bootstrap to end: no helper
# process outlives the job.
bash -- "$theseus_tpu_bootstrap" &
theseus_tpu_boot=$!
if [[ "$theseus_tpu_worker0" == 1 && ! -f "$theseus_tpu_base_copy" ]]; then
  while [[ ! -f "$theseus_tpu_run_dir/resume-base" ]] && kill -0 "$theseus_tpu_boot" 2> /dev/null; do sleep 0.2; done
  if [[ -f "$theseus_tpu_run_dir/resume-base" ]] && mkdir -p -- "${theseus_tpu_base_copy%/*}" 2> /dev/null; then
    cp -- "$theseus_tpu_run_dir/resume-base" "$theseus_tpu_base_copy.tmp.$$" 2> /dev/null \
      && mv -f -- "$theseus_tpu_base_copy.tmp.$$" "$theseus_tpu_base_copy" 2> /dev/null
  fi
fi
wait "$theseus_tpu_boot"
theseus_tpu_rc=$?
if [[ "$theseus_tpu_delete" == 1 ]]; then
  theseus_tpu_endpoint=${CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU:-https://tpu.googleapis.com/}
  theseus_tpu_url="${theseus_tpu_endpoint%/}/v2/$theseus_tpu_resource"
  theseus_tpu_ca=${CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE:-}
  env -u THESEUS_LOCAL_RUN setsid nohup bash -c '
exit_file=$1 after=$2 url=$3 ca=$4 log=$5
exec >> "$log" 2>&1
i=0
while [ ! -e "$exit_file" ] && [ "$i" -lt 600 ]; do sleep 1; i=$((i + 1)); done
sleep "$after"
md=${GCE_METADATA_HOST:-metadata.google.internal}
token=$(curl -fsS --max-time 10 -H "Metadata-Flavor: Google" \
  "http://$md/computeMetadata/v1/instance/service-accounts/default/token" \
  | sed -n "s/.*\"access_token\" *: *\"\([^\"]*\)\".*/\1/p")
[ -n "$token" ] || { echo "theseus: no token from the metadata server $md: the VM stays"; exit 1; }
cacert=()
[ -n "$ca" ] && cacert=(--cacert "$ca")
echo "theseus: deleting the VM (the job ended): DELETE $url"
printf "Authorization: Bearer %s\n" "$token" | curl -fsS --max-time 60 "${cacert[@]}" -H @- -X DELETE "$url" > /dev/null \
  || echo "theseus: the delete failed: the VM stays (theseus gc lists it)"
' bash "$theseus_tpu_exit_file" "$theseus_tpu_delete_after" "$theseus_tpu_url" "$theseus_tpu_ca" \
    "$theseus_tpu_delete_log" > /dev/null 2>&1 < /dev/null &
fi
exit "$theseus_tpu_rc"

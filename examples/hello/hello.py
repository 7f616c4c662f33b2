"""A tiny job: reads its config from THESEUS_CONFIG, prints a few training-like steps, and
keeps a tiny checkpoint so that a re-submit under the same name resumes where it stopped.

The checkpoint is `$THESEUS_CHECKPOINT_DIR/step_<K>/state.json`, written under a temp name and
renamed into place; then the `latest` marker (one line, `step_<K>`) is replaced the same way, so it
never names a half-written checkpoint. The bootstrap puts the checkpoint to start from in
`THESEUS_RESTORE_FROM` (see the README, "Resuming after preemption").
"""
import argparse
import json
import os
import platform
import time

parser = argparse.ArgumentParser()
parser.add_argument("--greeting", default="hello")
args = parser.parse_args()

with open(os.environ["THESEUS_CONFIG"]) as f:
    config = json.load(f)


def save(step, loss):
    """step_<step>/state.json, then `latest` -> step_<step>; each replaced by a rename."""
    ckpt = os.environ["THESEUS_CHECKPOINT_DIR"]
    name = f"step_{step}"
    tmp = os.path.join(ckpt, f".{name}.tmp.{os.getpid()}")
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump({"step": step, "loss": loss}, f)
    final = os.path.join(ckpt, name)
    if os.path.isdir(final):
        os.rename(final, tmp + ".old")
    os.rename(tmp, final)
    with open(os.path.join(ckpt, ".latest.tmp"), "w") as f:
        f.write(name + "\n")
    os.replace(os.path.join(ckpt, ".latest.tmp"), os.path.join(ckpt, "latest"))
    for leftover in os.listdir(ckpt):
        if leftover.endswith(".old"):
            old = os.path.join(ckpt, leftover)
            for entry in os.listdir(old):
                os.remove(os.path.join(old, entry))
            os.rmdir(old)


print(f"{args.greeting} (run {os.environ['THESEUS_RUN_ID']} on {platform.node()})", flush=True)
print(f"process {os.environ['THESEUS_PROCESS_ID']} of {os.environ['THESEUS_NUM_PROCESSES']}, "
      f"color={os.environ.get('HELLO_COLOR')}", flush=True)
start, loss = 0, 1.0
restore = os.environ.get("THESEUS_RESTORE_FROM")
if restore:
    with open(os.path.join(restore, "state.json")) as f:
        state = json.load(f)
    start, loss = int(state["step"]), float(state["loss"])
    print(f"resumed from step {start}", flush=True)
main = os.environ["THESEUS_PROCESS_ID"] == "0"
for step in range(start, int(config["steps"])):
    loss *= 1.0 - float(config["learning_rate"]) * 100
    print(f"step {step}: loss={loss:.4f}", flush=True)
    if main:
        save(step + 1, loss)
    time.sleep(0.2)
print("done", flush=True)

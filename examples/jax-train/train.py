"""A deterministic JAX training that checkpoints and resumes (the resume contract of theseus).

Linear regression on synthetic data: the batch of step s is drawn from `fold_in(seed, s)`, so a
run resumed at step K sees exactly the batches an uninterrupted run sees, and ends with the same
parameters (`final params sha256 <hex>`, printed by rank 0). Each process takes its share of the
batch; the gradients are gathered across processes and summed in rank order.

Checkpoints live in `$THESEUS_CHECKPOINT_DIR/step_<K>/` (`params.bin`: float32 little-endian,
`state.json`: the step, shapes and the params' sha256). Rank 0 writes one under a temp name,
fsyncs it and renames it into place; only then does it replace the `latest` marker (a temp file,
fsync, rename) with the line `step_<K>`. A checkpoint half-written when the job is killed is never
named by `latest`. On start, `$THESEUS_RESTORE_FROM` (set by the bootstrap) names the checkpoint
to resume from; without it the run starts at step 0.

Config (the experiment's `config`, from `$THESEUS_CONFIG`): steps (200), checkpoint_every (20),
step_seconds (0: a sleep after each step), seed (0).
"""

import hashlib
import json
import os
import shutil
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

FEATURES = 16
BATCH = 64
LEARNING_RATE = 0.05


def load_config():
    with open(os.environ["THESEUS_CONFIG"], encoding="utf-8") as f:
        config = json.load(f) or {}
    steps = int(config.get("steps", 200))
    every = int(config.get("checkpoint_every", 20))
    if steps < 0 or every <= 0:
        sys.exit("config: steps must be >= 0 and checkpoint_every > 0")
    return steps, every, float(config.get("step_seconds", 0)), int(config.get("seed", 0))


def params_bytes(params):
    w, b = params
    return np.asarray(w, dtype="<f4").tobytes() + np.asarray(b, dtype="<f4").tobytes()


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save(ckpt_dir, step, params):
    """Writes step_<step>/ completely, then points `latest` at it (both by rename)."""
    name = "step_%d" % step
    final = os.path.join(ckpt_dir, name)
    tmp = os.path.join(ckpt_dir, ".%s.tmp.%d" % (name, os.getpid()))
    os.makedirs(tmp)
    data = params_bytes(params)
    write_file(os.path.join(tmp, "params.bin"), data)
    state = {"step": step, "features": FEATURES, "sha256": hashlib.sha256(data).hexdigest()}
    write_file(os.path.join(tmp, "state.json"), json.dumps(state).encode())
    fsync_dir(tmp)
    if os.path.exists(final):
        # Left by an earlier run of this name: moved aside, then removed once the new one is in.
        old = os.path.join(ckpt_dir, ".%s.old.%d" % (name, os.getpid()))
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    marker_tmp = os.path.join(ckpt_dir, ".latest.tmp.%d" % os.getpid())
    write_file(marker_tmp, (name + "\n").encode())
    os.rename(marker_tmp, os.path.join(ckpt_dir, "latest"))
    fsync_dir(ckpt_dir)
    print("checkpoint step %d" % step, flush=True)


def restore(path):
    """(step, params) of the checkpoint at `path`; exits with a message when it is not one."""
    try:
        with open(os.path.join(path, "state.json"), encoding="utf-8") as f:
            state = json.load(f)
        with open(os.path.join(path, "params.bin"), "rb") as f:
            data = f.read()
    except (OSError, ValueError) as e:
        sys.exit("cannot restore from %s: %s" % (path, e))
    if hashlib.sha256(data).hexdigest() != state.get("sha256") or state.get("features") != FEATURES:
        sys.exit("cannot restore from %s: params.bin does not match state.json" % path)
    flat = np.frombuffer(data, dtype="<f4")
    return int(state["step"]), (jnp.asarray(flat[:FEATURES]), jnp.asarray(flat[FEATURES:]))


def batch(seed, step):
    """The batch of `step`: the same on every process and in every run of this seed."""
    key = jax.random.fold_in(jax.random.PRNGKey(seed), step)
    kx, kn = jax.random.split(key)
    x = jax.random.normal(kx, (BATCH, FEATURES))
    true_w = jnp.arange(1, FEATURES + 1, dtype=jnp.float32) / FEATURES
    y = x @ true_w + 0.5 + 0.01 * jax.random.normal(kn, (BATCH,))
    return x, y


@jax.jit
def grad_sum(params, x, y):
    """Sum (not mean) of squared errors' gradient over this process's rows, and their loss sum."""

    def loss(p):
        w, b = p
        return jnp.sum((x @ w + b - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return value, grads


def main():
    steps, every, step_seconds, seed = load_config()
    rank, count = jax.process_index(), jax.process_count()
    ckpt_dir = os.environ["THESEUS_CHECKPOINT_DIR"]
    os.makedirs(ckpt_dir, exist_ok=True)
    if rank == 0:
        # What a run killed while it wrote a checkpoint left (never named by `latest`).
        for leftover in os.listdir(ckpt_dir):
            if leftover.startswith(".") and (".tmp." in leftover or ".old." in leftover):
                path = os.path.join(ckpt_dir, leftover)
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.remove(path)
    restore_from = os.environ.get("THESEUS_RESTORE_FROM")
    if restore_from:
        start, params = restore(restore_from)
        start = min(start, steps)
        if rank == 0:
            print("resumed from step %d (%s, attempt %s)" % (start, restore_from, os.environ.get("THESEUS_ATTEMPT", "1")),
                  flush=True)
    else:
        start = 0
        k = jax.random.PRNGKey(seed + 1)
        params = (0.1 * jax.random.normal(k, (FEATURES,)), jnp.zeros((1,)))
        if rank == 0:
            print("starting at step 0", flush=True)
    for step in range(start, steps):
        x, y = batch(seed, step)
        mine = slice(rank, None, count)
        value, (gw, gb) = grad_sum(params, x[mine], y[mine])
        # Every process's sums, gathered and added in rank order: the same on every process.
        gathered = multihost_utils.process_allgather(jnp.concatenate([gw, gb, value[None]]))
        total = np.asarray(gathered).reshape(count, -1).sum(axis=0)
        gw_all, gb_all, loss = total[:FEATURES], total[FEATURES:FEATURES + 1], total[-1] / BATCH
        w, b = params
        params = (w - LEARNING_RATE * 2 * jnp.asarray(gw_all) / BATCH,
                  b - LEARNING_RATE * 2 * jnp.asarray(gb_all) / BATCH)
        done = step + 1
        if rank == 0:
            print("step %d loss %.6f" % (done, loss), flush=True)
            if done % every == 0 or done == steps:
                save(ckpt_dir, done, params)
        if step_seconds > 0:
            time.sleep(step_seconds)
    multihost_utils.sync_global_devices("jax-train done")
    if rank == 0:
        print("final params sha256 %s" % hashlib.sha256(params_bytes(params)).hexdigest(), flush=True)


if __name__ == "__main__":
    main()

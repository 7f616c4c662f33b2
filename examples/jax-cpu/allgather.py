"""Runs after theseus called jax.distributed.initialize: an allgather across all processes."""
import json
import os

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

with open(os.environ["THESEUS_CONFIG"]) as f:
    config = json.load(f)

pid = jax.process_index()
gathered = multihost_utils.process_allgather(jnp.array([pid * int(config["multiplier"]) + 1]))
multihost_utils.sync_global_devices("done")
print(f"process_index={pid} process_count={jax.process_count()} "
      f"devices={jax.device_count()} allgather={gathered.ravel().tolist()}", flush=True)

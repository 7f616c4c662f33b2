"""theseus runner of a job config of the original theseus: runs the registered job of the
shipped `theseus` package as the original's bootstrap.py did, with theseus's environment.

Usage (the bootstrap runs it through launcher.py, which has initialised JAX distributed):
    python .theseus/job.py

Written by theseus next to bootstrap.sh; it is a static file: every value reaches it through
the environment and the job config (THESEUS_CONFIG, JSON), never through templating.

What it reads:
- THESEUS_CONFIG: the job config (`job` is the registry key); THESEUS_JOB_LOAD: `--load`
  modules (comma separated), imported first;
- THESEUS_DISPATCH_BATCH_SIZE (an integer: `training.per_device_batch_size`) and
  THESEUS_DISPATCH_DISABLE_WANDB (truthy: `logging.wandb = false`), as the original applied them;
- THESEUS_JOB_NAME, THESEUS_PROJECT, THESEUS_GROUP; THESEUS_CLUSTER, THESEUS_CHIP,
  THESEUS_TOTAL_CHIPS, THESEUS_HOST; THESEUS_ROOT, THESEUS_WORK_DIR, THESEUS_LOG_DIR,
  THESEUS_DATA_DIR, THESEUS_CHECKPOINTS_DIR, THESEUS_RESULTS_DIR, THESEUS_STATUS_DIR (else the
  status root above THESEUS_RUN_DIR): the original's `Cluster` and `HardwareResult`;
- THESEUS_RESTORE_FROM and THESEUS_RESTORE_SOURCE (set by the bootstrap's resume step:
  `restore` for `submit --restore`, `latest`/`own` for a `latest` marker): the job goes through
  `RestoreableJob.from_checkpoint_path` (a path relative to the checkpoints dir) for `restore`,
  `RestoreableJob.latest` + `from_checkpoint(..., resume=True)` for a marker when the job class is
  restorable, else it starts fresh.

It writes no metadata (the bootstrap does) and installs no signal handler (the bootstrap records
`preempted`). Exit status: 0 when the job completed, 1 when it raised, 2 for a bad runtime
override, 3 (with one `[theseus] job config: ...` line) when the shipped code has no `theseus`
package or the key is not registered.
"""

import importlib
import json
import os
import sys


def log(message):
    sys.stderr.write("[theseus] " + message + "\n")
    sys.stderr.flush()


def refuse(message):
    log("job config: " + message)
    sys.exit(3)


def env(name, default=None):
    value = os.environ.get(name, "").strip()
    return value or default


def env_flag(name):
    value = os.environ.get(name)
    if value is None:
        return False
    return value.strip().lower() not in {"", "0", "false", "no", "off"}


def import_original():
    """The original's API from the shipped code (the work dir first on sys.path)."""
    work = env("THESEUS_WORK_DIR", os.getcwd())
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if work not in sys.path:
        sys.path.insert(0, work)
    for module in [m.strip() for m in env("THESEUS_JOB_LOAD", "").split(",") if m.strip()]:
        importlib.import_module(module)
    try:
        importlib.import_module("theseus")
    except ModuleNotFoundError as e:
        if e.name != "theseus":
            raise
        refuse(
            "the shipped code has no `theseus` package (searched %s and the job's Python): a job config runs a "
            "registered job of the original's theseus, so submit from that repository (or one that depends on it)"
            % work
        )
    from omegaconf import OmegaConf
    from theseus.base.chip import SUPPORTED_CHIPS
    from theseus.base.hardware import Cluster, ClusterMachine, HardwareResult, local
    from theseus.base.job import ExecutionSpec
    from theseus.base.topology import Topology
    from theseus.config import configuration
    from theseus.job import RestoreableJob
    from theseus.registry import JOBS

    return {
        "OmegaConf": OmegaConf,
        "SUPPORTED_CHIPS": SUPPORTED_CHIPS,
        "Cluster": Cluster,
        "ClusterMachine": ClusterMachine,
        "HardwareResult": HardwareResult,
        "local": local,
        "ExecutionSpec": ExecutionSpec,
        "Topology": Topology,
        "configuration": configuration,
        "RestoreableJob": RestoreableJob,
        "JOBS": JOBS,
    }


def apply_runtime_overrides(api, cfg):
    """THESEUS_DISPATCH_BATCH_SIZE and THESEUS_DISPATCH_DISABLE_WANDB, as the original's."""
    OmegaConf = api["OmegaConf"]
    size = os.environ.get("THESEUS_DISPATCH_BATCH_SIZE")
    if size is not None:
        try:
            size = int(size)
        except ValueError:
            log("error: THESEUS_DISPATCH_BATCH_SIZE must be an integer, got %r" % size)
            sys.exit(2)
        if OmegaConf.select(cfg, "training.per_device_batch_size", default=None) is None:
            log("warning: training.per_device_batch_size not found; skipping the batch size override")
        else:
            OmegaConf.update(cfg, "training.per_device_batch_size", size)
            log("overriding training.per_device_batch_size to %d (THESEUS_DISPATCH_BATCH_SIZE)" % size)
    if env_flag("THESEUS_DISPATCH_DISABLE_WANDB"):
        if OmegaConf.select(cfg, "logging.wandb", default=None) is not None:
            OmegaConf.update(cfg, "logging.wandb", False)
            log("overriding logging.wandb to false (THESEUS_DISPATCH_DISABLE_WANDB)")


def status_root():
    """THESEUS_STATUS_DIR, else the root of THESEUS_RUN_DIR (<status>/<project>/<group>/<name>/<run>)."""
    explicit = env("THESEUS_STATUS_DIR")
    if explicit:
        return explicit
    run_dir = env("THESEUS_RUN_DIR")
    if not run_dir:
        return None
    path = os.path.abspath(run_dir)
    for _ in range(4):
        path = os.path.dirname(path)
    return path


def hardware(api):
    """The original's HardwareResult for this process, from theseus's plan and paths."""
    chips = api["SUPPORTED_CHIPS"]
    root = env("THESEUS_ROOT", os.getcwd())
    work = env("THESEUS_WORK_DIR", os.getcwd())
    cluster = api["Cluster"](
        name=env("THESEUS_CLUSTER", "theseus"),
        root=root,
        work=work,
        log=env("THESEUS_LOG_DIR"),
        data=env("THESEUS_DATA_DIR"),
        checkpoints=env("THESEUS_CHECKPOINTS_DIR"),
        results=env("THESEUS_RESULTS_DIR"),
        status=status_root(),
    )
    chip_name = env("THESEUS_CHIP")
    chip = chips.get(chip_name) if chip_name and chip_name != "cpu" else None
    total = int(env("THESEUS_TOTAL_CHIPS", "0"))
    if chip is None:
        # A CPU job (or a chip the shipped code does not know): detect the devices with JAX, as
        # the original did for `chip: null`, keeping theseus's paths.
        detected = api["local"](cluster.root, cluster.work)
        hosts = [
            api["ClusterMachine"](name=h.name, cluster=cluster, resources=h.resources) for h in detected.hosts
        ]
        return api["HardwareResult"](chip=detected.chip, hosts=hosts, total_chips=detected.total_chips)
    hosts = [api["ClusterMachine"](name=env("THESEUS_HOST", "host"), cluster=cluster, resources={chip: total})]
    # hosts[jax.process_index()] must exist on every process, as the original padded it.
    import jax

    for i in range(len(hosts), jax.process_count()):
        hosts.append(api["ClusterMachine"](name="host-%d" % i, cluster=cluster, resources=hosts[0].resources))
    return api["HardwareResult"](chip=chip, hosts=hosts, total_chips=total)


def checkpoint_relative(path):
    """`path` relative to THESEUS_CHECKPOINTS_DIR (the original's restore paths are), when under it."""
    base = env("THESEUS_CHECKPOINTS_DIR")
    if base:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
        if rel != ".." and not rel.startswith(".." + os.sep):
            return rel
    return path


def main():
    api = import_original()
    OmegaConf = api["OmegaConf"]
    config_file = env("THESEUS_CONFIG")
    if not config_file:
        refuse("THESEUS_CONFIG is not set: run this file through theseus's bootstrap")
    with open(config_file) as f:
        cfg = OmegaConf.create(json.load(f))
    apply_runtime_overrides(api, cfg)
    job_key = cfg.get("job")
    jobs = api["JOBS"]
    if not job_key or job_key not in jobs:
        known = ", ".join(sorted(jobs.keys())) or "none"
        refuse("job %r is not registered in the shipped code's theseus.registry.JOBS (registered: %s)" % (job_key, known))
    job_cls = jobs[job_key]

    hw = hardware(api)
    n_shards = None
    if "request" in cfg and cfg.request is not None and "n_shards" in cfg.request:
        n_shards = cfg.request.n_shards
    topology = api["Topology"].new(hw.chip, shard_into=n_shards) if hw.chip else None
    distributed = int(env("THESEUS_NUM_PROCESSES", "1")) > 1
    project = env("THESEUS_PROJECT")
    group = env("THESEUS_GROUP")
    spec = api["ExecutionSpec"](
        name=env("THESEUS_JOB_NAME", "job"),
        # theseus's defaults are the original's None (the same paths).
        project=None if project in (None, "general") else project,
        group=None if group in (None, "default") else group,
        hardware=hw,
        topology=topology,
        distributed=distributed,
    )
    RestoreableJob = api["RestoreableJob"]
    configuration = api["configuration"]
    source = env("THESEUS_RESTORE_SOURCE", "latest" if env("THESEUS_RESTORE_FROM") else "")
    restore_from = env("THESEUS_RESTORE_FROM")
    if restore_from and source == "restore":
        rel = checkpoint_relative(restore_from)
        log("job config: %s restoring from %s (submit --restore)" % (job_key, rel))
        job, cfg = RestoreableJob.from_checkpoint_path(rel, spec, runtime_cfg=cfg)
    elif restore_from and issubclass(job_cls, RestoreableJob) and RestoreableJob.latest(spec):
        latest = RestoreableJob.latest(spec)
        log("job config: %s resuming from its latest checkpoint %s" % (job_key, latest))
        job, cfg = RestoreableJob.from_checkpoint(latest, spec, runtime_cfg=cfg, resume=True)
    else:
        log("job config: starting %s (%s)" % (job_key, job_cls.__name__))
        with configuration(cfg):
            job = job_cls(spec)
    with configuration(cfg):
        job()


if __name__ == "__main__":
    main()

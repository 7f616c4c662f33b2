"""The registered jobs: `toy/hello` (plain) and `toy/count` (restorable)."""

import json
import os

from theseus.job import BasicJob, RestoreableJob
from theseus.registry import job


@job("toy/hello")
class Hello(BasicJob):
    def run(self):
        cfg, spec = self.args, self.spec
        print(
            "[toy] hello key=%s name=%s project=%s group=%s chip=%s hosts=%s shards=%s distributed=%s "
            "lr=%s batch=%s wandb=%s status=%s"
            % (
                cfg.job,
                spec.name,
                spec.project,
                spec.group,
                spec.hardware.chip.name if spec.hardware.chip else None,
                [h.name for h in spec.hardware.hosts],
                spec.topology.shards if spec.topology else None,
                spec.distributed,
                cfg.training.lr,
                cfg.training.per_device_batch_size,
                cfg.logging.wandb,
                spec.hardware.hosts[0].cluster.status_dir,
            ),
            flush=True,
        )
        if os.environ.get("TOY_FAIL"):
            raise RuntimeError("toy failure asked for")


@job("toy/count")
class Count(RestoreableJob):
    def __init__(self, spec):
        super().__init__(spec)
        self.step = 0

    def restore_from_path(self, rel_path):
        path = self._checkpoints_dir(self.spec) / rel_path
        self.step = json.loads((path / "state.json").read_text())["step"]

    def run(self):
        start = self.step
        for step in range(start, int(self.args.training.steps)):
            print("[toy] count step %d" % step, flush=True)
            self.step = step + 1
            self.save("step_%d" % self.step, {"step": self.step})
        print("[toy] count done at %d (started at %d)" % (self.step, start), flush=True)

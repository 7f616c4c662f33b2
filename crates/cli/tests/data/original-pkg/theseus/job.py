"""Jobs: BasicJob, and RestoreableJob with its checkpoints and `latest` marker (as the original's)."""

import json
from pathlib import Path

from omegaconf import OmegaConf

from theseus.config import configuration, current_config


class BasicJob:
    def __init__(self, spec):
        self.spec = spec
        self.args = current_config()

    def run(self):
        raise NotImplementedError

    def __call__(self):
        self.run()


class RestoreableJob(BasicJob):
    @staticmethod
    def _checkpoints_dir(spec) -> Path:
        return spec.hardware.hosts[0].cluster.checkpoints_dir

    @staticmethod
    def _rel_path(spec, suffix) -> Path:
        return Path(spec.project or "general") / (spec.group or "default") / spec.name / str(suffix)

    def save(self, suffix, state):
        path = self._checkpoints_dir(self.spec) / self._rel_path(self.spec, suffix)
        path.mkdir(parents=True, exist_ok=True)
        (path / "state.json").write_text(json.dumps(state))
        OmegaConf.save(current_config(), path / "config.yaml")
        self.register(suffix)

    def register(self, suffix):
        path = self._checkpoints_dir(self.spec) / self._rel_path(self.spec, "latest")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(suffix))

    def restore_from_path(self, rel_path):
        raise NotImplementedError

    @classmethod
    def latest(cls, spec):
        path = cls._checkpoints_dir(spec) / cls._rel_path(spec, "latest")
        if not path.exists():
            return None
        return path.read_text().strip()

    @classmethod
    def from_checkpoint_path(cls, rel_path, spec, runtime_cfg=None, resume=False):
        path = cls._checkpoints_dir(spec) / Path(rel_path)
        cfg = OmegaConf.load(path / "config.yaml")
        if runtime_cfg is not None:
            cfg = OmegaConf.merge(cfg, runtime_cfg)
        with configuration(cfg):
            from theseus.registry import JOBS

            job_cls = JOBS.get(cfg.get("job")) or cls
            job = job_cls(spec)
            job.restore_from_path(rel_path)
        print("[toy] restored from %s (resume=%s)" % (rel_path, resume), flush=True)
        return job, cfg

    @classmethod
    def from_checkpoint(cls, suffix, spec, runtime_cfg=None, resume=False):
        return cls.from_checkpoint_path(cls._rel_path(spec, suffix), spec, runtime_cfg=runtime_cfg, resume=resume)

"""Clusters, machines and the allocated hardware, as the original's."""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from theseus.base.chip import SUPPORTED_CHIPS


@dataclass
class Cluster:
    name: str
    root: str
    work: str
    log: Optional[str] = None
    data: Optional[str] = None
    checkpoints: Optional[str] = None
    results: Optional[str] = None
    status: Optional[str] = None

    @property
    def checkpoints_dir(self) -> Path:
        return Path(self.checkpoints or os.path.join(self.root, "checkpoints"))

    @property
    def results_dir(self) -> Path:
        return Path(self.results or os.path.join(self.root, "results"))

    @property
    def status_dir(self) -> Path:
        return Path(self.status or os.path.join(self.root, "status"))


@dataclass
class ClusterMachine:
    name: str
    cluster: Cluster
    resources: dict = field(default_factory=dict)


@dataclass
class HardwareResult:
    chip: object
    hosts: list
    total_chips: int


def local(root_dir: str, work_dir: str) -> HardwareResult:
    """This machine's devices (CPU here), as the original detects them with JAX."""
    cluster = Cluster(name="local", root=root_dir, work=work_dir)
    cpu = SUPPORTED_CHIPS["cpu"]
    return HardwareResult(chip=cpu, hosts=[ClusterMachine("localhost", cluster, {cpu: 1})], total_chips=1)

"""What a job is given: its name, project, group, hardware and topology."""

from dataclasses import dataclass
from typing import Optional

from theseus.base.hardware import HardwareResult


@dataclass
class ExecutionSpec:
    name: str
    project: Optional[str]
    group: Optional[str]
    hardware: HardwareResult
    topology: object = None
    distributed: bool = False

"""The device mesh: data-parallel replicas times tensor-parallel shards."""

from dataclasses import dataclass


@dataclass
class Topology:
    chip: object
    shards: int

    @classmethod
    def new(cls, chip, shard_into=None):
        return cls(chip=chip, shards=shard_into or 1)

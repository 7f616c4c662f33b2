"""Chips by name, as the original's SUPPORTED_CHIPS."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Chip:
    name: str
    display_name: str


SUPPORTED_CHIPS = {
    "cpu": Chip("cpu", "CPU"),
    "h100": Chip("h100", "Nvidia H100"),
}

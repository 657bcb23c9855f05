"""The MAP-Elites archive: a grid over behaviour descriptors holding the fastest correct kernel per cell."""

from evo.archive.grid import (
    ELITE_FIELDS,
    Axis,
    Elite,
    GridArchive,
    Objective,
    default_descriptors,
    make_axes,
    throughput_objective,
)
from evo.archive.metrics import ArchiveMetrics, History
from evo.archive.status import AddResult, AddStatus

__all__ = ["GridArchive", "Axis", "Elite", "ELITE_FIELDS", "Objective", "throughput_objective",
           "default_descriptors", "make_axes", "AddStatus", "AddResult", "ArchiveMetrics", "History"]

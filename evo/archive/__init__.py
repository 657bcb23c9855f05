"""The MAP-Elites archive: a grid over behaviour descriptors holding the fastest correct kernel per cell."""

from evo.archive.grid import (
    ELITE_FIELDS,
    Axis,
    Elite,
    GridArchive,
    ThroughputOf,
    default_descriptors,
    make_axes,
    throughput_of,
)
from evo.archive.metrics import ArchiveMetrics, History
from evo.archive.status import AddResult, AddStatus

__all__ = ["GridArchive", "Axis", "Elite", "ELITE_FIELDS", "ThroughputOf", "throughput_of", "default_descriptors",
           "make_axes", "AddStatus", "AddResult", "ArchiveMetrics", "History", "Objective", "throughput_objective"]

# The names these had before issue 43 ("objective" now names only the fitness's clock), kept for callers of 0.1
Objective = ThroughputOf
throughput_objective = throughput_of

"""The store: one SQLite row per evaluation (`Store`, evo.store.sqlite), each an `Evaluation` (evo.store.record).
The store is a run's checkpoint: the archive, counters, status, export and report are rebuilt from it."""

from evo.store.record import MEASURED, STATUSES, Evaluation, Status
from evo.store.sqlite import Store

__all__ = ["Store", "Evaluation", "Status", "STATUSES", "MEASURED"]

"""Emitters under a scheduler: the ways a search proposes kernels ("variation", "guided", "exploit", "restart";
evo.search.emitters.base names them) and the bandit that shares the proposals among them
(evo.search.emitters.scheduler)."""

from evo.search.emitters.base import DEFAULT_EMITTERS, INITIAL, EmitContext, Emitter, get, names
from evo.search.emitters.scheduler import ArmStats, BanditScheduler
from evo.search.emitters.scheduler import get as get_scheduler
from evo.search.emitters.scheduler import names as scheduler_names

__all__ = ["Emitter", "EmitContext", "DEFAULT_EMITTERS", "INITIAL", "get", "names", "BanditScheduler", "ArmStats",
           "get_scheduler", "scheduler_names"]

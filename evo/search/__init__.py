"""The search: asynchronous steady-state MAP-Elites over an experiment's problems (evo.search.loop), making
genomes by variation (evo.search.variation) of parents chosen by a selection (evo.search.selection), and
telling what happens through events (evo.search.events). The archive and mutators are evo.archive and
evo.mutators."""

from evo.search.events import ProblemSummary, RunSummary, SearchEvent
from evo.search.loop import Search
from evo.search.run import StartupError, run_experiment

__all__ = ["run_experiment", "Search", "StartupError", "SearchEvent", "ProblemSummary", "RunSummary"]

"""The experiment: YAML -> a validated, frozen `Experiment` (evo.experiment.config, evo.experiment.spec), and
the run directory it writes (evo.experiment.rundir)."""

from evo.experiment.config import ConfigError, load_experiment, parse_experiment, parse_shape
from evo.experiment.rundir import RunDir
from evo.experiment.spec import Budget, DescriptorSpec, EvaluationSpec, ExecutorSpec, Experiment

__all__ = ["Experiment", "Budget", "ExecutorSpec", "DescriptorSpec", "EvaluationSpec", "ConfigError",
           "load_experiment", "parse_experiment", "parse_shape", "RunDir"]

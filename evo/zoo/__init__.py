"""The zoo: from a model's config to the kernel problems of its layers and one experiment per operator
(evo.zoo.model, evo.zoo.problems). It composes experiment/ and adds no second pipeline."""

from evo.zoo.model import ModelError, ModelSpec, load_model, parse_model
from evo.zoo.problems import KernelProblem, experiments_for, layer_problems

__all__ = ["ModelSpec", "ModelError", "load_model", "parse_model", "KernelProblem", "layer_problems",
           "experiments_for"]

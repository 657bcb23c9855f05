"""Variation operators by registry name: "mutate", "mutate_multi", "crossover_uniform", "crossover_group"."""

from evo.mutators.base import Mutator, MutatorMix, get, names
from evo.mutators.crossover import GroupCrossover, UniformCrossover
from evo.mutators.mutation import MultiGeneMutation, PointMutation

__all__ = ["Mutator", "MutatorMix", "get", "names", "PointMutation", "MultiGeneMutation", "UniformCrossover",
           "GroupCrossover"]

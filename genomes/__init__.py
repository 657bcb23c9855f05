"""Genome families: typed genes, validity rules, repair, seeds and behaviour descriptors."""

from genomes.base import Descriptor, Genome, GenomeFamily, InvalidGenome
from genomes.genes import Boolean, Categorical, Gene, IntChoice, PowerOfTwo

__all__ = ["Gene", "PowerOfTwo", "IntChoice", "Categorical", "Boolean",
           "Genome", "GenomeFamily", "Descriptor", "InvalidGenome"]

"""evo: evolutionary quality-diversity search over Triton kernels. Importing it does no work."""

__version__ = "0.1.0"


"""The GEMM operator and its variants with fused epilogues (`gemm+bias+gelu`, `gemm+residual`, `gemm+swiglu`).

operator.py binds the genome (genomes/gemm.py) to the operator interface; source.py renders a module (header.py
its summary and constants, launcher.py and launcher_epilogue.py its host side); epilogue.py and variants.py
are the fused epilogues and the operators they make; selfcheck.py and epilogue_selfcheck.py the exported
module's self-check; baselines.py and helion_baseline.py what evo is measured against.
"""

from operators.gemm.operator import GemmOperator

__all__ = ["GemmOperator"]

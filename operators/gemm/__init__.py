"""The GEMM operator and its variants with fused epilogues (`gemm+bias+gelu`, `gemm+residual`, `gemm+swiglu`,
`gemm+geglu`).

operator.py binds the genome (genomes/gemm.py) to the operator interface. A Triton rendering is the header template
(templates/module.py.jinja, filled by source.py and header.py) above real modules pasted verbatim: tile_store.py and
kernel.py (the one @triton.jit kernel, its structure genes constexpr switches), host.py (checks, descriptors, padded
rows: both launchers'), plan.py (the launch plan) and, for padded rows, padding.py. The Gluon rendering is
gluon_source.py (CONFIG, gluon_split.py and gluon_kernel.py pasted) with launcher.py: host.py and gluon_plan.py (its
launch plan) pasted, the entry from templates/gluon_launcher.py.jinja. epilogue.py and variants.py are the fused
epilogues and the operators they make; selfcheck.py the exported module's self-check;
baselines.py and helion_baseline.py what evo is measured against.
"""

from operators.gemm.operator import GemmOperator

__all__ = ["GemmOperator"]

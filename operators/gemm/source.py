"""The module of one Triton GEMM genome: the header template (operators/gemm/templates/module.py.jinja: summary,
CONFIG, entry) above operators/gemm/tile_store.py, operators/gemm/kernel.py, operators/gemm/host.py and
operators/gemm/plan.py pasted verbatim (and, for pad_rows, operators/gemm/padding.py). The genome reaches the code
only through CONFIG: the kernel's constexprs switch its structure, and the plan reads its launch options.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evo.launch import runtime_source
from operators._paste import constant, pasted_source
from operators._template import render_template
from operators.gemm.epilogue import GATES
from operators.gemm.header import config as _config
from operators.gemm.header import config_lines
from operators.gemm.header import summary as _summary
from operators.gemm.launcher import ENTRY_NAME, KERNEL_NAME

__all__ = ["gemm_source", "KERNEL_NAME", "ENTRY_NAME", "KERNEL_FILE", "PLAN_FILE", "STORE_FILE"]

HERE = Path(__file__).parent
STORE_FILE = HERE / "tile_store.py"  # pasted before the kernel, which calls it
KERNEL_FILE = HERE / "kernel.py"
HOST_FILE = HERE / "host.py"  # the checks, descriptors and padded rows both GEMM launchers share
PLAN_FILE = HERE / "plan.py"
PADDING_FILE = HERE / "padding.py"  # pasted for pad_rows (read as text: the module imports torch and triton)
TEMPLATE = HERE / "templates" / "module.py.jinja"


def gemm_source(g: Mapping[str, Any], title: str, row_align: int = 1, aligned_dims: tuple[str, ...] = (),
                epilogue: Any = None) -> str:
    """The whole module for genome values `g`; `title` opens its docstring (names the genome).

    `aligned_dims` (of "K", "N") are row strides known to be multiples of `row_align` elements for the problem
    at hand though not of 16 (what Triton detects by itself); pointer kernels then state it for vectorization.
    `epilogue` (an operators.gemm.epilogue.Epilogue) is fused into the store; its operands follow B in the entry.
    """
    if aligned_dims and (row_align <= 1 or g["memory"] != "pointer"):
        raise ValueError("aligned_dims needs row_align > 1 and pointer memory")
    g = {**g, "row_align": row_align, "aligned_dims": tuple(aligned_dims), "epilogue": epilogue}
    gate = epilogue.gate if epilogue else None
    product = (f"{GATES[gate]}(A @ B[:, :N]) * (A @ B[:, N:]) for A[M, K], B[K, 2N]" if gate
               else "A[M, K] @ B[K, N]")
    operands = tuple(epilogue.operands) if epilogue else ()
    config = config_lines(_config(g))
    return render_template(
        TEMPLATE, title=title, entry=ENTRY_NAME, operands=operands,
        what=textwrap.fill(f"C[M, N] = {product}, row-major, fp32 accumulation: {_summary(g)}.", 100),
        product=f"A @ B with the fused epilogue {epilogue.name}" if epilogue else "A @ B",
        runtime=runtime_source().rstrip("\n"), config=config, config_width=max(len(text) for text, _ in config),
        pad_elements=constant(PADDING_FILE, "PAD_ELEMENTS") if g["pad_rows"] else None,
        tensor_operands=[n for n in operands if n != "scale"],
        epilogue_args=", ".join(n if n in operands else "None" for n in ("bias", "residual", "scale")),
        kernel=pasted_source(STORE_FILE) + "\n\n" + pasted_source(KERNEL_FILE).rstrip("\n"),
        plan=pasted_source(HOST_FILE) + "\n\n" + pasted_source(PLAN_FILE).rstrip("\n"),
        padding=pasted_source(PADDING_FILE).rstrip("\n") if g["pad_rows"] else "")

"""The host side of a Gluon GEMM rendering (operators/gemm/gluon_source.py): what both GEMM launchers share
(operators/gemm/host.py: checks, host descriptors, padded rows, stream-K shares) and the Gluon GEMM's launch plan
(operators/gemm/gluon_plan.py), pasted verbatim (with operators/gemm/padding.py for pad_rows), then the entry function
written by one template (templates/gluon_launcher.py.jinja). The genome reaches them only through the module's CONFIG.

Also the names both renderings share: the kernel's and the entry's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from operators._paste import constant, pasted_source
from operators._template import render_template

__all__ = ["gluon_launcher_source", "KERNEL_NAME", "ENTRY_NAME"]

KERNEL_NAME = "matmul_kernel"
ENTRY_NAME = "matmul"
HERE = Path(__file__).parent
TEMPLATE = HERE / "templates" / "gluon_launcher.py.jinja"
# the real modules a Gluon rendering pastes (read as text: they import torch and triton)
HOST_FILE = HERE / "host.py"
GLUON_PLAN_FILE = HERE / "gluon_plan.py"
PADDING_FILE = HERE / "padding.py"


def gluon_launcher_source(g: Mapping[str, Any]) -> str:
    """The launcher of Gluon genome values `g` (with "epilogue": an operators.gemm.epilogue.Epilogue or None): the
    pasted plans and the entry, which calls gluon_plan with the module's CONFIG."""
    ep = g.get("epilogue")
    operands = tuple(ep.operands) if ep else ()
    return render_template(
        TEMPLATE, entry=ENTRY_NAME, operands=operands, keyed=[n for n in operands if n != "scale"],
        what=f"A @ B with the fused epilogue {ep.name}" if ep else "A @ B",
        epilogue_args=", ".join(n if n in operands else "None" for n in ("bias", "residual", "scale")),
        pad_elements=constant(PADDING_FILE, "PAD_ELEMENTS") if g["pad_rows"] else None,
        host=pasted_source(HOST_FILE).rstrip("\n"), gluon_plan=pasted_source(GLUON_PLAN_FILE).rstrip("\n"),
        padding=pasted_source(PADDING_FILE).rstrip("\n") if g["pad_rows"] else "")

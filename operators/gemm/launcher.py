"""The host side of a Gluon GEMM rendering (operators/gemm/gluon_source.py): what its genome asks of the launcher,
worked out here as a `GluonLaunch`, then written by one template (templates/gluon_launcher.py.jinja). The Triton
rendering's launcher is real code (operators/gemm/plan.py), pasted into its modules.

Also the names both renderings share: the kernel's and the entry's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genomes.gemm import column_blocks
from operators._paste import MARKER, constant, pasted_source
from operators._template import render_template

__all__ = ["gluon_launcher_source", "GluonLaunch", "KERNEL_NAME", "ENTRY_NAME"]

KERNEL_NAME = "matmul_kernel"
ENTRY_NAME = "matmul"
TEMPLATES = Path(__file__).with_name("templates")
# the real modules whose text a Gluon rendering pastes or reads constants from (they import torch and triton)
PADDING_FILE = Path(__file__).with_name("padding.py")
PLAN_FILE = Path(__file__).with_name("plan.py")
# a stream-K plan's grid, shares and workspace, as the Gluon launcher writes them (its consumers of a row split
# count their arrivals apiece); operators/gemm/plan.py's stream_k_shares is the Triton launcher's
_GLUON_STREAM_K_PLAN = "\n" + (TEMPLATES / "stream_k_plan.py.jinja").read_text()


@dataclass(frozen=True)
class GluonLaunch:
    """What a Gluon genome asks of its launcher: the structure switches, the epilogue's operands (as the entry takes
    them and as the launch passes them), and the names the template writes."""

    pad: bool
    stream_k: bool
    split: bool
    wide: bool
    rows: str  # the rows of one consumer's A box and C store: ROWS under a row split, else BLOCK_M
    operands: tuple[str, ...]  # the epilogue's arguments of the entry, after A and B
    passed: tuple[str, ...]  # the same as the launch passes them (the scale as a float on every call)
    keyed: tuple[str, ...]  # those whose signatures key a plan (the tensors)
    bias: bool
    residual: bool
    scale: bool
    epilogue: bool
    what: str  # C = what
    tail: str  # the kernel's last arguments after its constexprs (stream-K's, the row split's ROWS)
    strides: tuple[str, str, str]  # the plan's names of the row strides of A, B and C
    padding: str
    pad_elements: int
    sk_max_parts: int
    cpu_num_sms: int
    kernel_name: str = KERNEL_NAME
    entry: str = ENTRY_NAME


def gluon_launch(g: Mapping[str, Any]) -> GluonLaunch:
    """The launch of Gluon genome values `g` (with "epilogue": an operators.gemm.epilogue.Epilogue or None)."""
    ep = g.get("epilogue")
    operands = tuple(ep.operands) if ep else ()
    rows = g["consumer_split"] == "rows"
    tail = (", partials, counters, sk_share, sk_slots" if g["stream_k"] else "") + (", ROWS" if rows else "")
    helpers = pasted_source(PADDING_FILE).removeprefix(MARKER + "\n").lstrip("\n") if g["pad_rows"] else ""
    return GluonLaunch(
        pad=g["pad_rows"], stream_k=g["stream_k"], split=g["split_k"] > 1, wide=len(column_blocks(g["BLOCK_N"])) > 1,
        rows="ROWS" if rows else "BLOCK_M", operands=operands,
        passed=tuple("float(scale)" if n == "scale" else n for n in operands),
        keyed=tuple(n for n in operands if n != "scale"), bias=bool(ep and ep.bias),
        residual=bool(ep and ep.residual), scale=bool(ep and ep.scale), epilogue=ep is not None,
        what=f"A @ B with the fused epilogue {ep.name}" if ep else "A @ B", tail=tail,
        strides=("a_stride", "b_stride", "c_stride") if g["pad_rows"] else ("K", "N", "N"), padding=helpers,
        pad_elements=constant(PADDING_FILE, "PAD_ELEMENTS"), sk_max_parts=constant(PLAN_FILE, "SK_MAX_PARTS"),
        cpu_num_sms=constant(PLAN_FILE, "CPU_NUM_SMS"))


def gluon_launcher_source(g: Mapping[str, Any]) -> str:
    """The launcher of a Gluon rendering (operators/gemm/gluon_source.py): the plain GEMM's checks, a persistent
    grid, and host tensor descriptors that carry their shared-memory layouts (NVMMA swizzles) into the kernel."""
    return render_template(TEMPLATES / "gluon_launcher.py.jinja", launch=gluon_launch(g))

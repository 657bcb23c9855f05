"""What is being searched: a problem (operator, shape, dtype) and the GPU target it is compiled for."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Problem", "Target", "DTYPES", "HOPPER", "INTERPRETED_HOPPER", "shape_distance", "operator_file_stem"]

# dtype names used everywhere in evo (YAML, store, export) and their torch attribute names.
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


@dataclass(frozen=True)
class Problem:
    """One search target: an operator applied to one shape in one dtype.

    `shape` is an ordered tuple of (dimension name, size) pairs, e.g. (("M", 4096), ("N", 4096), ("K", 4096)).
    """

    operator: str
    shape: tuple[tuple[str, int], ...]
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {sorted(DTYPES)}")
        for dim, size in self.shape:
            if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
                raise ValueError(f"dimension {dim} must be a positive integer, got {size!r}")

    @classmethod
    def make(cls, operator: str, dims: tuple[str, ...], sizes: list[int] | tuple[int, ...], dtype: str) -> Problem:
        if len(dims) != len(sizes):
            raise ValueError(f"{operator} takes {len(dims)} dimensions ({'x'.join(dims)}), got {len(sizes)}")
        return cls(operator, tuple(zip(dims, (int(s) for s in sizes), strict=True)), dtype)

    @staticmethod
    def parse_shape(text: str) -> tuple[int, ...]:
        """'4096x4096x4096' -> (4096, 4096, 4096); raises ValueError naming the text otherwise."""
        try:
            sizes = tuple(int(p) for p in str(text).lower().split("x"))
        except ValueError:
            raise ValueError(f"shape {text!r} is not of the form AxBxC with positive integers") from None
        if not sizes or any(s <= 0 for s in sizes):
            raise ValueError(f"shape {text!r} is not of the form AxBxC with positive integers")
        return sizes

    @property
    def dims(self) -> dict[str, int]:
        return dict(self.shape)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.shape)

    @property
    def shape_text(self) -> str:
        return "x".join(str(s) for s in self.sizes)

    @property
    def key(self) -> str:
        """Stable identifier, e.g. 'gemm:4096x4096x4096:bf16'."""
        return f"{self.operator}:{self.shape_text}:{self.dtype}"

    def to_json(self) -> str:
        return json.dumps({"operator": self.operator, "shape": [list(p) for p in self.shape], "dtype": self.dtype})

    @classmethod
    def from_json(cls, text: str) -> Problem:
        d = json.loads(text)
        return cls(d["operator"], tuple((str(k), int(v)) for k, v in d["shape"]), d["dtype"])


def operator_file_stem(operator: str) -> str:
    """An operator's name as (part of) a file or run name: letters, digits and '_' kept, anything else as '-'
    (gemm+bias+gelu -> gemm-bias-gelu): the bench's result files and the zoo's experiments use it."""
    return re.sub(r"[^A-Za-z0-9_]+", "-", operator)


def shape_distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """How far apart two shapes of one operator are: the sum over dimensions of |log2(a / b)| (export's nearest
    measured problem and the shared results database's nearest problems both use it)."""
    return sum(abs(math.log2(x / y)) for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class Target:
    """The GPU a kernel is compiled for. Validity rules and static resource checks read this."""

    name: str
    arch: int  # compute capability as an integer: 90 for Hopper
    smem_bytes: int  # shared memory a block may use
    num_sms: int
    warp_size: int = 32
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_torch(cls, device: int = 0) -> Target:
        import torch

        p = torch.cuda.get_device_properties(device)
        smem = getattr(p, "shared_memory_per_block_optin", 0) or 232448
        return cls(p.name, p.major * 10 + p.minor, int(smem), int(p.multi_processor_count))

    @property
    def interpreted(self) -> bool:
        """Whether kernels run in Triton's CPU interpreter (the smoke run) rather than on the GPU named: the
        interpreter runs `tl` kernels only, so a family refuses what it renders otherwise (Gluon)."""
        return bool(self.extra.get("interpreted"))


# H100 and H200 share the Hopper SM: 132 SMs, 227 KiB of opt-in shared memory per block.
HOPPER = Target("hopper", 90, 232448, 132)
# Hopper's rules, as Triton's CPU interpreter runs them (the smoke evaluator's target)
INTERPRETED_HOPPER = Target("hopper (Triton's CPU interpreter)", 90, 232448, 132, extra={"interpreted": True})

"""A GEMM's epilogue: what happens to the fp32 product tile between the K loop and the store.

An epilogue is spelled as the operator-name suffix that asks for it: `gemm+bias+gelu` is
C = gelu(A @ B + bias). Its parts, applied in this order (the canonical spelling lists them in it too):

  scale       C = scale * (A @ B)                 a float argument
  bias        + bias[N]                           one value per output column
  gelu        GELU, exact (erf)                   one activation at most
  gelu_tanh   GELU, tanh approximation
  silu        x * sigmoid(x)
  relu        max(x, 0)
  swiglu      silu(A @ Bg) * (A @ Bu)             B is [K, 2N]: the gate's N columns, then the up projection's
  geglu       gelu_tanh(A @ Bg) * (A @ Bu)        the same with GELU's tanh approximation as the gate (Gemma 2's MLP)
  residual    + residual[M, N]                    after the activation: the residual stream of a layer

The spec sets the epilogue switches of the kernels (SCALE, BIAS, ACTIVATION, SWIGLU, GEGLU, RESIDUAL:
operators/gemm/kernel.py and gluon_kernel.py hold the math) and gives the exact fp32 reference (`reference`) and
what a PyTorch user writes for it in eager code (`eager`); the tests run every part through all three.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Epilogue", "ACTIVATIONS", "GATES", "PARTS"]

# activation -> its name for humans (the kernels' ACTIVATION switch takes the key)
ACTIVATIONS = {"gelu": "GELU (erf)", "gelu_tanh": "GELU (tanh)", "silu": "SiLU", "relu": "ReLU"}
GATES = {"swiglu": "silu", "geglu": "gelu_tanh"}  # a gated epilogue -> the activation of its gate
PARTS = ("scale", "bias", *ACTIVATIONS, *GATES, "residual")  # the canonical order

@dataclass(frozen=True)
class Epilogue:
    scale: bool = False
    bias: bool = False
    activation: str | None = None  # a key of ACTIVATIONS
    swiglu: bool = False
    residual: bool = False
    geglu: bool = False  # (after residual: positional constructions of the others keep their meaning)

    @classmethod
    def parse(cls, parts: tuple[str, ...] | list[str]) -> Epilogue:
        """The epilogue of the name suffix `parts` (e.g. ("bias", "gelu")); ValueError naming what is wrong."""
        unknown = [p for p in parts if p not in PARTS]
        if unknown:
            raise ValueError(f"unknown epilogue part {unknown[0]!r}; parts are {', '.join(PARTS)}")
        if len(set(parts)) != len(parts):
            raise ValueError(f"an epilogue part is named twice in {'+'.join(parts)!r}")
        acts = [p for p in parts if p in ACTIVATIONS or p in GATES]
        if len(acts) > 1:
            raise ValueError(f"one activation at most, got {' and '.join(acts)}")
        ep = cls(scale="scale" in parts, bias="bias" in parts,
                 activation=next((p for p in parts if p in ACTIVATIONS), None), swiglu="swiglu" in parts,
                 residual="residual" in parts, geglu="geglu" in parts)
        if ep.gate and (ep.bias or ep.scale):
            raise ValueError(f"{ep.gate} takes neither bias nor scale (the gate and up projections of LLMs have none)")
        if tuple(parts) != ep.parts:
            raise ValueError(f"write the epilogue in its canonical order: {'+'.join(ep.parts)}")
        return ep

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(p for p in PARTS if p == "scale" and self.scale or p == "bias" and self.bias
                     or p == self.activation or p == self.gate or p == "residual" and self.residual)

    @property
    def gate(self) -> str | None:
        """The gated epilogue, "swiglu" or "geglu" (B is [K, 2N]: the gate's N columns, then the up projection's),
        or None."""
        return "swiglu" if self.swiglu else "geglu" if self.geglu else None

    @property
    def name(self) -> str:
        return "+".join(self.parts)

    @property
    def operands(self) -> tuple[str, ...]:
        """The entry function's arguments after A and B, in order."""
        return tuple(p for p in ("bias", "residual", "scale") if getattr(self, p))

    @property
    def text(self) -> str:
        """For humans: "scale, + bias, GELU (erf), + residual"."""
        words = (["scale"] if self.scale else []) + (["+ bias"] if self.bias else [])
        words += [ACTIVATIONS[self.activation]] if self.activation else []
        words += ["SwiGLU (silu(gate) * up)"] if self.swiglu else []
        words += ["GeGLU (gelu_tanh(gate) * up)"] if self.geglu else []
        return ", ".join(words + (["+ residual"] if self.residual else []))

    # -- kernels -------------------------------------------------------------------------------------------
    def kernel_params(self) -> str:
        """The kernel parameters of the operands, as the Gluon rendering names them."""
        names = {"bias": "bias_ptr", "residual": "residual_ptr", "scale": "scale"}
        return ", ".join(names[o] for o in self.operands)

    # -- torch -----------------------------------------------------------------------------------------------
    def reference(self, a: Any, b: Any, *operands: Any) -> Any:
        """The exact result in fp32 (products of the same rounded inputs)."""
        import torch

        args = dict(zip(self.operands, operands, strict=True))
        y = torch.matmul(a.float(), b.float())
        if self.gate:
            gate, up = y.chunk(2, dim=-1)
            y = _torch_activation(GATES[self.gate], gate) * up
        if self.scale:
            y = y * args["scale"]
        if self.bias:
            y = y + args["bias"].float()
        if self.activation:
            y = _torch_activation(self.activation, y)
        if self.residual:
            y = y + args["residual"].float()
        return y

    def eager(self, a: Any, b: Any, *operands: Any) -> Any:
        """What a PyTorch user writes for it: nn.Linear's addmm for a bias, then one op per part (in the inputs'
        dtype); SwiGLU or GeGLU over a merged gate-up weight, as serving frameworks store it."""
        import torch

        args = dict(zip(self.operands, operands, strict=True))
        alpha = args.get("scale", 1.0)
        if self.bias:
            y = torch.addmm(args["bias"], a, b, alpha=alpha)
        else:
            y = torch.matmul(a, b)
            if self.scale:
                y = y * alpha
        if self.gate:
            gate, up = y.chunk(2, dim=-1)
            y = _torch_activation(GATES[self.gate], gate) * up
        if self.activation:
            y = _torch_activation(self.activation, y)
        if self.residual:
            y = args["residual"] + y
        return y


def _torch_activation(name: str, y: Any) -> Any:
    import torch.nn.functional as F

    if name == "gelu":
        return F.gelu(y)
    if name == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if name == "silu":
        return F.silu(y)
    return F.relu(y)

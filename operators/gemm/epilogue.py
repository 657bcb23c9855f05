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
  residual    + residual[M, N]                    after the activation: the residual stream of a layer

The same spec renders the Triton lines of the fused kernel (`triton_lines`), the exact fp32 reference
(`reference`) and what a PyTorch user writes for it in eager code (`eager`), so all three agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Epilogue", "ACTIVATIONS", "GLUON_ACTIVATIONS", "PARTS"]

# activation -> (description, Triton expression of fp32 `x`)
ACTIVATIONS = {
    "gelu": ("GELU (erf)", "0.5 * {x} * (1.0 + tl.math.erf({x} * 0.7071067811865476))"),
    # tanh(u) = 2 sigmoid(2u) - 1, so 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
    "gelu_tanh": ("GELU (tanh)", "{x} * tl.sigmoid(1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x}))"),
    "silu": ("SiLU", "{x} * tl.sigmoid({x})"),
    "relu": ("ReLU", "tl.maximum({x}, 0.0)"),
}
PARTS = ("scale", "bias", *ACTIVATIONS, "swiglu", "residual")  # the canonical order
# activation -> Gluon expression of fp32 `x` (Gluon has erf and exp, no sigmoid: sigmoid(u) = 1 / (1 + exp(-u)))
GLUON_ACTIVATIONS = {
    "gelu": "0.5 * {x} * (1.0 + gl.erf({x} * 0.7071067811865476))",
    "gelu_tanh": "{x} / (1.0 + gl.exp(-1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x})))",
    "silu": "{x} / (1.0 + gl.exp(-{x}))",
    "relu": "gl.maximum({x}, 0.0)",
}


@dataclass(frozen=True)
class Epilogue:
    scale: bool = False
    bias: bool = False
    activation: str | None = None  # a key of ACTIVATIONS
    swiglu: bool = False
    residual: bool = False

    @classmethod
    def parse(cls, parts: tuple[str, ...] | list[str]) -> Epilogue:
        """The epilogue of the name suffix `parts` (e.g. ("bias", "gelu")); ValueError naming what is wrong."""
        unknown = [p for p in parts if p not in PARTS]
        if unknown:
            raise ValueError(f"unknown epilogue part {unknown[0]!r}; parts are {', '.join(PARTS)}")
        if len(set(parts)) != len(parts):
            raise ValueError(f"an epilogue part is named twice in {'+'.join(parts)!r}")
        acts = [p for p in parts if p in ACTIVATIONS or p == "swiglu"]
        if len(acts) > 1:
            raise ValueError(f"one activation at most, got {' and '.join(acts)}")
        ep = cls(scale="scale" in parts, bias="bias" in parts,
                 activation=next((p for p in parts if p in ACTIVATIONS), None), swiglu="swiglu" in parts,
                 residual="residual" in parts)
        if ep.swiglu and (ep.bias or ep.scale):
            raise ValueError("swiglu takes neither bias nor scale (the gate and up projections of LLMs have none)")
        if tuple(parts) != ep.parts:
            raise ValueError(f"write the epilogue in its canonical order: {'+'.join(ep.parts)}")
        return ep

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(p for p in PARTS if p == "scale" and self.scale or p == "bias" and self.bias
                     or p == self.activation or p == "swiglu" and self.swiglu or p == "residual" and self.residual)

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
        words += [ACTIVATIONS[self.activation][0]] if self.activation else []
        words += ["SwiGLU (silu(gate) * up)"] if self.swiglu else []
        return ", ".join(words + (["+ residual"] if self.residual else []))

    # -- Triton --------------------------------------------------------------------------------------------
    def kernel_params(self) -> str:
        names = {"bias": "bias_ptr", "residual": "residual_ptr", "scale": "scale"}
        return ", ".join(names[o] for o in self.operands)

    def triton_lines(self, x: str, cols: str, width: str) -> str:
        """Lines that apply the epilogue to the fp32 tile `x` whose columns start at `cols` (`width` of them)
        and whose rows are `offs_cm`; rows >= M and columns >= N are read as zeros (never stored)."""
        lines = []
        if self.bias or self.residual:
            lines.append(f"offs_ep = {cols} + tl.arange(0, {width})")
        if self.scale:
            lines.append(f"{x} = {x} * scale")
        if self.bias:
            lines.append(f"{x} += tl.load(bias_ptr + offs_ep, mask=offs_ep < N, other=0.0).to(tl.float32)[None, :]")
        if self.activation:
            lines.append(f"{x} = " + ACTIVATIONS[self.activation][1].format(x=x))
        if self.residual:
            lines += ["ep_mask = (offs_cm[:, None] < M) & (offs_ep[None, :] < N)",
                      f"{x} += tl.load(residual_ptr + offs_cm[:, None] * N + offs_ep[None, :], mask=ep_mask,",
                      "                other=0.0).to(tl.float32)"]
        return "\n".join(lines) + "\n" if lines else ""

    def gluon_lines(self, x: str, layout: str = "acc_layout", width: str = "BLOCK_N", offset: str = "") -> str:
        """Lines of a Gluon consumer that apply the epilogue to its fp32 accumulator `x` (layout `layout`) of the
        tile at (pid_m, pid_n), `width` columns starting `offset` into the tile (a wide tile's second column
        block); rows >= M and columns >= N are read as zeros (the TMA store drops them)."""
        lines = []
        if self.bias or self.residual:
            lines.append(f"offs_en = pid_n * BLOCK_N{offset} + gl.arange(0, {width}, "
                         f"layout=gl.SliceLayout(0, {layout}))")
        if self.residual:
            lines.append(f"offs_em = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, {layout}))")
        if self.scale:
            lines.append(f"{x} = {x} * scale")
        if self.bias:
            lines.append(f"{x} += gl.expand_dims(gl.load(bias_ptr + offs_en, mask=offs_en < N, other=0.0)"
                         ".to(gl.float32), 0)")
        if self.activation:
            lines.append(f"{x} = " + GLUON_ACTIVATIONS[self.activation].format(x=x))
        if self.residual:
            lines += ["ep_mask = (gl.expand_dims(offs_em, 1) < M) & (gl.expand_dims(offs_en, 0) < N)",
                      "ep_offs = gl.expand_dims(offs_em, 1) * N + gl.expand_dims(offs_en, 0)",
                      f"{x} += gl.load(residual_ptr + ep_offs, mask=ep_mask, other=0.0).to(gl.float32)"]
        return "\n".join(lines) + "\n" if lines else ""

    # -- torch -----------------------------------------------------------------------------------------------
    def reference(self, a: Any, b: Any, *operands: Any) -> Any:
        """The exact result in fp32 (products of the same rounded inputs)."""
        import torch

        args = dict(zip(self.operands, operands, strict=True))
        y = torch.matmul(a.float(), b.float())
        if self.swiglu:
            gate, up = y.chunk(2, dim=-1)
            y = torch.nn.functional.silu(gate) * up
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
        dtype); SwiGLU over a merged gate-up weight, as serving frameworks store it."""
        import torch

        args = dict(zip(self.operands, operands, strict=True))
        alpha = args.get("scale", 1.0)
        if self.bias:
            y = torch.addmm(args["bias"], a, b, alpha=alpha)
        else:
            y = torch.matmul(a, b)
            if self.scale:
                y = y * alpha
        if self.swiglu:
            gate, up = y.chunk(2, dim=-1)
            y = torch.nn.functional.silu(gate) * up
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

"""A Mixture-of-Experts decoder layer (Mixtral, Qwen-MoE) in plain PyTorch: the reference layer's attention half
(evo.zoo.layer.DecoderLayer) and a routed MLP, as transformers 5 writes it:

    h -> post_attention_norm -> router logits [T, E] -> softmax (fp32) -> top-k (renormalised where the spec says:
      Mixtral always, Qwen-MoE by norm_topk_prob) -> each token's k experts' SwiGLU MLPs, weighted and summed
      (+ Qwen-MoE's shared expert, scaled by sigmoid(shared_expert_gate(x))) + h

The experts' weights are held as checkpoints hold them (transformers 5's MixtralExperts): `experts_gate_up`
[E, 2 I, hidden] (each expert's gate rows, then its up rows) and `experts_down` [E, hidden, I], the operands of the
moe operators. Torch runs the experts one of transformers 5's two ways (`experts=`):
- "loop" (transformers' eager default): the experts hit (a host sync), per expert the gathered rows through F.linear;
  no CUDA graph captures it, and torch.compile(fullgraph=True) stops at its data-dependent shapes;
- "grouped_mm" (its `experts_implementation="grouped_mm"`): the slots sorted by expert, torch._grouped_mm over each
  expert's rows with the offsets as a device tensor, scattered back: static shapes, captured in a graph.
Patched roles (evo.zoo.patch): norm, the attention half's (linear_qkv | qkv, rope, attention, linear_o_proj | o_proj),
router (gemm: op(x, B)) | linear_router (linear: op(x, W)), moe_gate_up (op(x, experts_gate_up, ids) -> [T, k, I]),
moe_down (op(hidden, experts_down, ids, weights) -> [T, hidden], the top-k summed), and the shared expert's
shared_gate_up (gemm+swiglu) | linear_shared_gate_up (linear+swiglu), shared_down (gemm) | linear_shared_down (linear).
The router's softmax and top-k, the shared expert's gate and the residual add run in torch, as the plan notes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from evo.zoo.layer import DecoderLayer
from evo.zoo.model import ModelSpec

__all__ = ["MoEDecoderLayer", "EXPERTS"]

EXPERTS = ("loop", "grouped_mm")  # transformers 5's experts implementations the torch layer runs


class MoEDecoderLayer(DecoderLayer):
    """One decoder layer of a MoE `spec` (num_experts >= 1); DecoderLayer's arguments, and `experts`: how torch runs
    the experts ("loop" or "grouped_mm", EXPERTS)."""

    ROLES = ("norm", "qkv", "rope", "attention", "o_proj", "linear_qkv", "linear_o_proj", "router", "linear_router",
             "moe_gate_up", "moe_down", "shared_gate_up", "shared_down", "linear_shared_gate_up",
             "linear_shared_down")

    def __init__(self, spec: ModelSpec, *args: object, experts: str = "loop", **kwargs: object) -> None:
        if experts not in EXPERTS:
            raise ValueError(f"experts must be one of {', '.join(EXPERTS)} (how torch runs them); got {experts!r}")
        super().__init__(spec, *args, **kwargs)  # type: ignore[arg-type]
        self.experts = experts

    def _check_kind(self, spec: ModelSpec) -> None:
        if not spec.num_experts:
            raise ValueError(f"{spec.name}: a dense MLP; MoEDecoderLayer builds a layer of routed experts")
        if spec.post_norms or spec.mlp != "swiglu":
            raise ValueError(f"{spec.name}: experts run SwiGLU in a Llama-style layer; got mlp {spec.mlp}"
                             + (" with Gemma's four norms" if spec.post_norms else ""))

    def _make_mlp(self, spec: ModelSpec, eps: float) -> None:
        h, inter, e = spec.hidden_size, spec.intermediate_size, spec.num_experts
        # True: ffn keeps its router logits [T, E] in router_logits (evo.bench.zoo_tolerance finds near ties there)
        self.keep_router_logits, self.router_logits = False, None
        self.router = nn.Linear(h, e, bias=False)
        self.experts_gate_up = nn.Parameter(torch.empty(e, 2 * inter, h))
        self.experts_down = nn.Parameter(torch.empty(e, h, inter))
        if spec.shared_expert_size:
            s = spec.shared_expert_size
            self.shared_gate_up_proj = nn.Linear(h, 2 * s, bias=False)
            self.shared_down_proj = nn.Linear(s, h, bias=False)
            self.shared_expert_gate = nn.Linear(h, 1, bias=False)

    def mlp_linears(self) -> dict[str, nn.Linear]:
        out = {"router": self.router}
        if self.spec.shared_expert_size:
            out.update(shared_gate_up=self.shared_gate_up_proj, shared_down=self.shared_down_proj)
        return out

    def layer_roles(self) -> tuple[str, ...]:
        """The roles of this layer (evo.zoo.patch.roles_of): the plan's (evo.zoo.problems) at every token count."""
        shared = ("shared_gate_up", "shared_down") if self.spec.shared_expert_size else ()
        cached = ("rope", "cache_attention") if self.context else ()
        return ("norm", "qkv", "o_proj", "router", *shared, *cached, "attention", "linear_qkv", "linear_o_proj",
                "linear_router", *(f"linear_{r}" for r in shared), "moe_gate_up", "moe_down")

    def active_weights(self, tokens: int) -> tuple[int, int]:
        """(bytes of the weights `tokens` tokens read at the least: the experts they can reach, min(E, T k), and every
        other weight; parameters a token multiplies by: its k experts' and the projections') for evo.bench.zoo_floor."""
        s = self.spec
        expert_params = self.experts_gate_up[0].numel() + self.experts_down[0].numel()
        size = self.experts_down.element_size()
        hit = min(s.num_experts, tokens * s.experts_per_token)
        dense = sum(p.numel() for name, p in self.named_parameters() if not name.startswith("experts_"))
        norms = sum(p.numel() for name, p in self.named_parameters() if name.endswith("norm.weight"))
        return (dense + hit * expert_params) * size, dense - norms + s.experts_per_token * expert_params

    # -- the routed MLP -------------------------------------------------------------------------------------------
    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        """h + the routed experts (+ the shared expert) of post_attention_norm(h)."""
        x = self._norm(self.post_attention_norm, h)
        logits = self._dense("router", self.router, x)
        if self.keep_router_logits:
            self.router_logits = logits.detach()
        weights, ids = self.route(logits)
        y = self._experts(x, ids, weights)
        if self.spec.shared_expert_size:
            y = y + self._shared(x)
        return h + y

    def route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(topk_weights in the activations' dtype, topk_ids int64) of router logits [T, E], as Mixtral and Qwen-MoE
        route: softmax in fp32, the top k, renormalised to sum to 1 where the spec's norm_topk_prob says."""
        probs = torch.softmax(logits.float(), dim=-1)
        weights, ids = torch.topk(probs, self.spec.experts_per_token, dim=-1)
        if self.spec.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(logits.dtype), ids

    def _experts(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sum over j of weights[t, j] * expert_{ids[t, j]}(x[t]): moe_gate_up then moe_down where patched, torch's
        `experts` way where not (both halves in one pass when neither is patched)."""
        t = x.shape[0]
        up, down = self._op("moe_gate_up", t), self._op("moe_down", t)
        if up is None and down is None:
            return self._torch_experts(x, ids, weights, None)
        hidden = up(x, self.experts_gate_up, ids) if up is not None else self._torch_experts(x, ids, None, None)
        if down is not None:
            return down(hidden, self.experts_down, ids, weights)
        return self._torch_experts(None, ids, weights, hidden)

    def _torch_experts(self, x: torch.Tensor | None, ids: torch.Tensor, weights: torch.Tensor | None,
                       hidden: torch.Tensor | None) -> torch.Tensor:
        """Torch's experts: x through both halves (weights given) -> [T, hidden]; x through gate_up alone (weights
        None) -> hidden [T, k, I] in slot order; or the given hidden through down alone -> [T, hidden]."""
        if self.experts == "grouped_mm":
            return self._grouped(x, ids, weights, hidden)
        tokens, top_k = ids.shape
        e_count = self.spec.num_experts
        source = x if x is not None else hidden
        if weights is None:
            out = source.new_zeros(tokens, top_k, self.spec.intermediate_size)
        else:
            out = source.new_zeros(tokens, self.spec.hidden_size)
        mask = F.one_hot(ids, num_classes=e_count).permute(2, 1, 0)  # [E, k, T]
        for expert in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero():  # the experts hit (a host sync)
            e = int(expert[0])
            pos, tok = torch.where(mask[e])
            if x is not None:
                gate, up = F.linear(x[tok], self.experts_gate_up[e]).chunk(2, dim=-1)
                act = F.silu(gate) * up
                if weights is None:
                    out[tok, pos] = act
                    continue
            else:
                act = hidden[tok, pos]
            rows = F.linear(act, self.experts_down[e]) * weights[tok, pos, None]
            out.index_add_(0, tok, rows.to(out.dtype))
        return out

    def _grouped(self, x: torch.Tensor | None, ids: torch.Tensor, weights: torch.Tensor | None,
                 hidden: torch.Tensor | None) -> torch.Tensor:
        """_torch_experts through torch._grouped_mm (transformers 5's grouped_mm experts): the slots sorted by expert,
        each expert's rows a group whose end is a device tensor (no host sync), scattered back to slot order."""
        tokens, top_k = ids.shape
        e_count = self.spec.num_experts
        order = torch.sort(ids.reshape(-1), stable=True)[1]
        counts = torch.zeros(e_count, dtype=torch.int64, device=ids.device)
        counts.scatter_add_(0, ids.reshape(-1), torch.ones_like(ids.reshape(-1)))
        ends = torch.cumsum(counts, dim=0).to(torch.int32)
        if x is not None:
            gate_up = torch._grouped_mm(x[order // top_k], self.experts_gate_up.transpose(1, 2), offs=ends)
            gate, up = gate_up.chunk(2, dim=-1)
            act = F.silu(gate) * up
            if weights is None:
                slots = torch.empty_like(act)
                slots[order] = act
                return slots.view(tokens, top_k, -1)
        else:
            act = hidden.reshape(tokens * top_k, -1)[order]
        rows = torch._grouped_mm(act, self.experts_down.transpose(1, 2), offs=ends) * weights.reshape(-1)[order, None]
        return act.new_zeros(tokens, self.spec.hidden_size).index_add_(0, order // top_k, rows.to(act.dtype))

    def _shared(self, x: torch.Tensor) -> torch.Tensor:
        """Qwen-MoE's shared expert: sigmoid(shared_expert_gate(x)) * down(SwiGLU(gate_up(x)))."""
        t = x.shape[0]
        linear = self.shared_gate_up_proj
        fused = None if self._torch_at("linear_shared_gate_up", t) else self._fused("shared_gate_up", t)
        op = None if self._torch_at("linear_shared_gate_up", t) else self._op("shared_gate_up", t)
        if fused is not None:
            hidden = fused(x, linear.weight)
        elif op is not None:
            hidden = op(x, self.shared_gate_up_b)
        else:
            gate, up = linear(x).chunk(2, dim=-1)
            hidden = F.silu(gate) * up
        return torch.sigmoid(self.shared_expert_gate(x)) * self._dense("shared_down", self.shared_down_proj, hidden)

"""The rendered attention module around its kernels: header, argument checks, the launch plan and the entry function.

`attention(q, k, v, out=None, scale=None)` takes q[B, Hq, Lq, D] and k, v[B, Hkv, Lk, D] (any strides whose last
is 1; others are copied), Hq a multiple of Hkv, and returns o[B, Hq, Lq, D] (contiguous) in q's dtype. The plan
for one argument signature binds the kernels once and keeps the split partials and the counters of
`reduce: last_program` with it, so a call allocates only its output, and a CUDA graph may capture it (two
streams running one plan at once would share its partials: give each its own module).
"""

from __future__ import annotations

from evo.launch import runtime_source
from evo.problem import Problem, Target
from genomes.attention import head_dim_pad
from operators.attention.gluon_source import GLUON_IMPORTS, gluon_kernel_source
from operators.attention.source import COMBINE_ROWS, KernelFacts, combine_source, kernel_source

__all__ = ["render_module"]

LOG2E = 1.4426950408889634


def _title(name: str, causal: bool, problem: Problem, target: Target) -> str:
    """The module docstring's first line: what the kernel computes, for which problem and target."""
    shape, kind = problem.dims, "causal (bottom-right) " if causal else ""
    return (f'"""evo kernel: {kind}attention, rendered for {problem.key} on {target.name} '
            f'({name}: {shape["heads"]} query heads on {shape["kv_heads"]} KV heads, head dim {shape["head_dim"]}).')


_IMPORTS = ["import math", "", "import torch", "import triton"]


def _header(name: str, f: KernelFacts, problem: Problem, target: Target) -> list[str]:
    g = f.g
    structure = []
    if f.pack:
        structure.append("query heads sharing a KV head packed into one tile")
    if f.tma:
        structure.append("K and V loaded through tensor descriptors (TMA)")
    if f.persistent:
        structure.append(f"a persistent grid of {g['persistent']} programs per SM")
    if f.split > 1:
        how = "a second launch" if g["reduce"] == "launch" else "the last program of each tile"
        structure.append(f"keys split over {f.split} programs per tile, combined by {how}")
    return [
        _title(name, f.causal, problem, target),
        "",
        f"FlashAttention-style online softmax in base 2, {g['BLOCK_M']}x{g['BLOCK_N']} tiles"
        + (f"; {'; '.join(structure)}." if structure else "."),
        '"""',
        "",
        *_IMPORTS,
        "import triton.language as tl",
        "",
        runtime_source(),
        "",
        f"CAUSAL = {f.causal}",
        f"PACK_GQA = {f.pack}",
        f"BLOCK_M = {g['BLOCK_M']}",
        f"BLOCK_N = {g['BLOCK_N']}",
        f"SPLIT = {f.split}",
        f"NUM_WARPS = {g['num_warps']}",
        f"NUM_STAGES = {g['num_stages']}",
        f"LOG2E = {LOG2E!r}",
        *([f"PROGRAMS = {g['persistent'] * target.num_sms}  # persistent grid: {g['persistent']} per SM of "
           f"{target.num_sms}"] if f.persistent else []),
        "",
        "",
    ]


# the head of every rendering's plan: the argument checks (ValueError naming what is wrong)
_PLAN_HEAD = [
    "def _described(t):",
    "    if isinstance(t, torch.Tensor):",
    '        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"',
    "    return repr(t)[:60]",
    "",
    "",
    "def _plan(q, k, v, out):",
    '    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature.',
    '    Returns run(q, k, v, out, scale) for every call of this signature."""',
    "    for name, t in (('q', q), ('k', k), ('v', v)):",
    "        if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.numel() == 0:",
    "            raise ValueError(f\"{name} must be a non-empty 4-d tensor [batch, heads, length, head_dim]; \"",
    "                             f\"got {_described(t)}\")",
    "    if k.shape != v.shape or k.dtype != q.dtype or v.dtype != q.dtype or k.device != q.device \\",
    "            or v.device != q.device:",
    "        raise ValueError(f\"k and v must have one shape and q's dtype and device; got q {_described(q)}, \"",
    "                         f\"k {_described(k)}, v {_described(v)}\")",
    "    b, hq, n_q, d = q.shape",
    "    hkv, n_k = k.shape[1], k.shape[2]",
    "    if k.shape[0] != b or k.shape[3] != d or hq % hkv:",
    "        raise ValueError(f\"k, v must be [{b}, H, Lk, {d}] with H dividing {hq}; got {_described(k)}\")",
    "    if CAUSAL and n_q > n_k:",
    "        raise ValueError(f\"causal attention needs no more queries than keys; got {n_q} and {n_k}\")",
    "    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != q.shape",
    "                            or out.dtype != q.dtype or out.device != q.device):",
    "        raise ValueError(f\"out must be a tensor of q's shape, dtype and device; got {_described(out)}\")",
]


def _entry(causal: bool) -> list[str]:
    """The module's entry function: the plan of the arguments' signature, made once, then run."""
    return [
        "_PLANS = PlanCache()  # argument signature -> run(...): checks, grid and the bound kernels, done once",
        "",
        "",
        "def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None = None,",
        "              scale: float | None = None) -> torch.Tensor:",
        f'    """{"Causal (bottom-right) s" if causal else "S"}oftmax(q k^T * scale) v per head, k and v shared by '
        'groups of query',
        '    heads (GQA); scale defaults to 1/sqrt(head_dim). q [B, Hq, Lq, D], k and v [B, Hkv, Lk, D]."""',
        "    key = (signature(q), signature(k), signature(v), None if out is None else signature(out))",
        "    run = _PLANS.get(key)",
        "    if run is None:",
        "        run = _PLANS.add(key, _plan(q, k, v, out))",
        "    return run(q, k, v, out, scale)",
    ]


def _plan(f: KernelFacts) -> list[str]:
    g = f.g
    tiles_first = g["grid"] == "tiles_first"
    grid = "(n_tiles, b * h_grid, SPLIT)" if tiles_first else "(b * h_grid, n_tiles, SPLIT)"
    if f.persistent:
        grid = "(min(n_tiles * b * h_grid * SPLIT, PROGRAMS),)"
    limit = "1 << 31" if f.persistent else 65535
    axis = "n_tiles * b * h_grid * SPLIT" if f.persistent else "b * h_grid" if tiles_first else "n_tiles"
    scratch = ", scratch=True" if f.tma else ""
    lines = _PLAN_HEAD + [
        "    group = hq // hkv",
        "    h_grid = hkv if PACK_GQA else hq",
        "    n_tiles = triton.cdiv(n_q * group if PACK_GQA else n_q, BLOCK_M)",
        f"    if {axis} >= {limit}:",
        "        raise ValueError(f\"{b} x {h_grid} heads or {n_tiles} query tiles exceed a grid axis \"",
        f"                         \"({limit})\")",
        "    d_pad = max(16, triton.next_power_of_2(d))",
        f"    kernel = BoundKernel(attention_kernel, {grid}, "
        '{"num_warps": NUM_WARPS, "num_stages": NUM_STAGES}' + f"{scratch})",
        "    copies = [t.stride(-1) != 1 for t in (q, k, v)]  # the head dimension must be contiguous",
        "    n_part = b * hq * n_q",
    ]
    if f.split > 1:
        lines += ["    po = torch.empty((SPLIT, n_part, d_pad), dtype=torch.float32, device=q.device)",
                  "    pl = torch.empty((SPLIT, n_part), dtype=torch.float32, device=q.device)",
                  "    parts = (po, pl, n_part)"]
        if f.last_program:
            lines.append("    parts += (torch.zeros(b * h_grid * n_tiles, dtype=torch.int32, device=q.device),)")
        else:
            lines.append(f"    combine = BoundKernel(attention_combine, (triton.cdiv(n_part, {COMBINE_ROWS}),), "
                         "{\"num_warps\": 4})")
    else:
        lines.append("    parts = ()")
    if f.tma:  # a tensor descriptor's base and row stride must be 16-byte multiples: else K and V are copied
        lines += ["    for i, t in ((1, k), (2, v)):",
                  "        copies[i] = copies[i] or any(s % (16 // t.element_size()) for s in t.stride()[:3]) \\",
                  "            or t.data_ptr() % 16",
                  "    if d * q.element_size() % 16:",
                  "        raise ValueError(f\"this kernel loads K and V through TMA, whose rows must be 16-byte \"",
                  "                         f\"multiples; head_dim {d} is not\")"]
    lines += [
        "    consts = (group, d, d_pad, BLOCK_M, BLOCK_N" + (", SPLIT)" if f.split > 1 else ")"),
        "",
        "    def run(q, k, v, out, scale):",
        "        if copies[0] or copies[1] or copies[2]:",
        "            q, k, v = (t.contiguous() if c else t for t, c in zip((q, k, v), copies))",
        "        if out is None:",
        "            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)",
        "        qk_scale = (1.0 / math.sqrt(d) if scale is None else scale) * LOG2E",
        "        kernel(q, k, v, out, *parts, qk_scale, q.stride(0), q.stride(1), q.stride(2), k.stride(0),",
        "               k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1),",
        "               out.stride(2), n_q, n_k, n_tiles, h_grid, b * h_grid, *consts)",
    ]
    if f.split > 1 and not f.last_program:
        lines += ["        combine(po, pl, out, n_part, n_q, hq, out.stride(0), out.stride(1), out.stride(2),",
                  f"                d, d_pad, SPLIT, {COMBINE_ROWS})"]
    lines += [
        "        return out",
        "",
        "    run.kernel = kernel  # for inspection",
        "    return run",
        "",
        "",
    ] + _entry(f.causal)
    return lines


def _gluon_header(name: str, g: dict, causal: bool, problem: Problem, target: Target) -> list[str]:
    shape = problem.dims
    consumers = ("one consumer of NUM_WARPS warps" if g["consumers"] == 1 else
                 "two one-warp-group consumers, each with its own BLOCK_M rows,")
    clauses = ["(FlashAttention-3's roles)"]
    clauses += [text for on, text in ((g["persistent"], "a persistent grid loops over the work items"),
                                      (g["overlap"], "a block's softmax runs under the previous block's P V"),
                                      (g["pingpong"], "the consumers take turns at the tensor cores (ping-pong)"))
                if on]
    return [
        _title(name, causal, problem, target),
        "",
        "Rendered with Gluon: a one-warp TMA producer streams K and V through a ring of NUM_STAGES shared-memory",
        "slots;",
        f"{consumers} run the wgmma products and the online softmax in base 2",
        "; ".join(clauses) + ".",
        f"Call attention(q, k, v, out=None, scale=None) with fp16 or bf16 tensors of head dim {shape['head_dim']} "
        "on an sm_90 GPU.",
        '"""',
        "",
        *_IMPORTS,
        *GLUON_IMPORTS.rstrip("\n").split("\n"),
        "",
        runtime_source(),
        "",
        f"CAUSAL = {causal}",
        f"BLOCK_M = {g['BLOCK_M']}  # query rows per consumer",
        f"BLOCK_N = {g['BLOCK_N']}  # keys per block",
        f"HEAD_D = {shape['head_dim']}",
        f"NUM_STAGES = {g['num_stages']}  # slots of the K/V ring",
        f"CONSUMERS = {g['consumers']}",
        f"NUM_WARPS = {g['num_warps']}  # warps of the first consumer (the producer's warp is added)",
        f"REVERSE = {g['q_order'] == 'reverse'}  # query tiles issued last first",
        f"OVERLAP = {bool(g['overlap'])}",
        *([f"PROGRAMS = {g['persistent'] * target.num_sms}  # persistent grid: {g['persistent']} per SM of "
           f"{target.num_sms}, looping over the work items"] if g["persistent"] else []),
        f"PINGPONG = {bool(g['pingpong'])}  # the two consumers take turns issuing their products",
        f"LOG2E = {LOG2E!r}",
        "_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}",
        "",
        "",
    ]


def _gluon_plan(persistent: bool) -> list[str]:
    return _PLAN_HEAD + [
        "    if q.dtype not in _GL_DTYPES or d != HEAD_D:",
        "        raise ValueError(f\"this kernel was rendered for fp16 or bf16 with head_dim {HEAD_D}; got \"",
        "                         f\"{_described(q)}\")",
        "    if b * hq > 65535:",
        "        raise ValueError(f\"{b} x {hq} heads exceed a grid axis (65535)\")",
        "    group = hq // hkv",
        "    n_tiles = triton.cdiv(n_q, BLOCK_M * CONSUMERS)",
        "    # contiguous tensors: 2-d descriptors over [batch x heads x length, head_dim] rows; others (a transposed",
        "    # [B, L, H, D] view, a KV-cache slice) in place through 4-d ones when TMA can read them (16-byte aligned",
        "    # base and strides), else copied",
        "    tma_ok = lambda t: t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(",
        "        s % (16 // t.element_size()) == 0 for s in t.stride()[:3])",
        "    strided = any(not t.is_contiguous() for t in (q, k, v)) and all(tma_ok(t) for t in (q, k, v))",
        "    copies = [not strided and (not t.is_contiguous() or t.data_ptr() % 16) for t in (q, k, v)]",
        "    direct = out is None or out.stride(-1) == 1",
        "    dims = [1, 1] if strided else []",
        "    layout = lambda rows: gl.NVMMASharedLayout.get_default_for(dims + [rows, d], _GL_DTYPES[q.dtype])",
        "    if strided:",
        "        specs = {i: (list(t.shape), list(t.stride()), dims + [rows, d], layout(rows))",
        "                 for i, t, rows in ((0, q, BLOCK_M), (1, k, BLOCK_N), (2, v, BLOCK_N))}",
        "    else:",
        "        specs = {0: ([b * hq * n_q, d], [d, 1], [BLOCK_M, d], layout(BLOCK_M)),",
        "                 1: ([b * hkv * n_k, d], [d, 1], [BLOCK_N, d], layout(BLOCK_N)),",
        "                 2: ([b * hkv * n_k, d], [d, 1], [BLOCK_N, d], layout(BLOCK_N))}",
        f"    grid = {'(min(PROGRAMS, n_tiles * b * hq),)' if persistent else '(n_tiles, b * hq)'}",
        "    kernel = BoundKernel(attention_kernel, grid, {\"num_warps\": NUM_WARPS}, descriptors=specs)",
        "",
        "    def run(q, k, v, out, scale):",
        "        if copies[0] or copies[1] or copies[2]:",
        "            q, k, v = (t.clone(memory_format=torch.contiguous_format) if c else t",
        "                       for t, c in zip((q, k, v), copies))",
        "        given = out",
        "        if out is None or not direct:",
        "            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)",
        "        qk_scale = (1.0 / math.sqrt(d) if scale is None else scale) * LOG2E",
        "        kernel(q, k, v, out, qk_scale, out.stride(0), out.stride(1), out.stride(2), n_q, n_k, n_tiles, hq,",
        "               group, b * hq, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES, CONSUMERS, NUM_WARPS, CAUSAL, REVERSE,",
        f"               OVERLAP, PINGPONG, strided, {persistent})",
        "        if given is not None and not direct:",
        "            return given.copy_(out)",
        "        return out",
        "",
        "    run.kernel = kernel  # for inspection",
        "    run.strided = strided",
        "    return run",
        "",
        "",
    ]


def render_module(name: str, g: dict, causal: bool, problem: Problem, target: Target) -> str:
    if g["backend"] == "gluon":
        lines = (_gluon_header(name, g, causal, problem, target) + gluon_kernel_source(g) + ["", ""]
                 + _gluon_plan(g["persistent"] > 0) + _entry(causal))
        return "\n".join(lines) + "\n"
    f = KernelFacts(g, causal, problem.dims["head_dim"], head_dim_pad(problem))
    lines = _header(name, f, problem, target) + kernel_source(f) + ["", ""]
    if f.split > 1 and not f.last_program:
        lines += combine_source(f) + ["", ""]
    lines += _plan(f)
    return "\n".join(lines) + "\n"

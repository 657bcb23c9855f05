"""The Triton source of an attention kernel: the @triton.jit functions a genome (genomes/attention.py) renders to.

Scores are kept in base 2: the softmax scale is folded with log2(e) into one factor (qk_scale) applied to each
tile of Q K^T, and exponentials are exp2. Causal masks are aligned to the bottom right, as a KV cache needs
(query i of n_q sees keys up to i + n_k - n_q; the usual top-left causal mask when n_q == n_k). Rows that no
key of a block is visible to keep a finite running max, so no -inf - (-inf) ever reaches exp2.
"""

from __future__ import annotations

from typing import Any

from operators._template import jit_def

__all__ = ["KernelFacts", "kernel_source", "combine_source", "COMBINE_ROWS"]

COMBINE_ROWS = 16  # output rows per program of the combining launch
NEG_INF = 'float("-inf")'


class KernelFacts:
    """The render-time choices of one kernel, read from a valid genome and the problem."""

    def __init__(self, g: dict[str, Any], causal: bool, head_dim: int, d_pad: int) -> None:
        self.g, self.causal = g, causal
        self.pack = bool(g["pack_gqa"])
        self.split = g["kv_split"]
        self.last_program = self.split > 1 and g["reduce"] == "last_program"
        self.padded_d = head_dim != d_pad  # head dim not a power of two: the tiles' last columns are masked
        self.tma = g["kv_load"] == "tma"  # K and V through tensor descriptors made in the kernel
        self.persistent = g["persistent"] > 0  # a fixed grid whose programs loop over the work items

    def d_mask(self, axis: str) -> str:
        """' & d_ok[...]' masking the padded head-dimension columns, or nothing."""
        return f" & d_ok[{axis}]" if self.padded_d else ""


def _online_step(f: KernelFacts, masked: bool) -> list[str]:
    """One step of the key loop at `start`: scores, online max and sum, and the output tile update."""
    if f.tma:  # rows past n_k and the padded head dims arrive as zeros: only the scores are masked
        k_load = ["k = k_desc.load([start, 0])", "s = tl.dot(q, tl.trans(k)) * qk_scale"]
        v_load = "v = v_desc.load([start, 0])"
    else:
        k_mask = v_mask = ""
        if masked or f.padded_d:
            k_ok = "(cols[None, :] < n_k)" if masked else "(cols[None, :] >= 0)"
            v_ok = "(cols[:, None] < n_k)" if masked else "(cols[:, None] >= 0)"
            k_mask = f", mask={k_ok}{f.d_mask(':, None')}, other=0.0"
            v_mask = f", mask={v_ok}{f.d_mask('None, :')}, other=0.0"
        k_load = [f"kt = tl.load(k_base + cols[None, :].to(tl.int64) * skn + dims[:, None]{k_mask})",
                  "s = tl.dot(q, kt) * qk_scale"]
        v_load = f"v = tl.load(v_base + cols[:, None].to(tl.int64) * svn + dims[None, :]{v_mask})"
    lines = ["cols = start + tl.arange(0, BLOCK_N)", *k_load]
    if masked:
        visible = "(cols[None, :] < n_k)"
        if f.causal:
            visible += " & (cols[None, :] <= q_pos[:, None] + (n_k - n_q))"
        lines += [f"s = tl.where({visible}, s, {NEG_INF})",
                  "m_new = tl.maximum(m_i, tl.max(s, axis=1))",
                  f"m_use = tl.where(m_new == {NEG_INF}, 0.0, m_new)  # rows with no key visible yet"]
    else:
        lines += ["m_new = tl.maximum(m_i, tl.max(s, axis=1))", "m_use = m_new"]
    return lines + [
        "alpha = tl.exp2(m_i - m_use)",
        "p = tl.exp2(s - m_use[:, None])",
        "l_i = l_i * alpha + tl.sum(p, axis=1)",
        v_load,
        "acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])",
        "m_i = m_new",
    ]


def _loops(f: KernelFacts) -> list[str]:
    def loop(lo: str, hi: str, masked: bool) -> list[str]:
        return [f"for start in tl.range({lo}, {hi}, BLOCK_N):"] + ["    " + x for x in _online_step(f, masked)]

    if f.g["mask_loop"] == "masked":
        return ["# every key block masked"] + loop("lo", "hi", True)
    return (["# key blocks that no row of the tile masks, then the rest (the causal diagonal, the ragged end)"]
            + loop("lo", "tl.minimum(full, hi)", False) + loop("tl.maximum(lo, full)", "hi", True))


def _combine(rows_ok: str) -> list[str]:
    """Combine the kv_split partial outputs of rows `part_row` (log-sum-exp weighted) into `o`."""
    return [
        f"m_c = tl.full([{rows_ok}], {NEG_INF}, tl.float32)",
        f"den = tl.zeros([{rows_ok}], tl.float32)",
        f"o = tl.zeros([{rows_ok}, D_PAD], tl.float32)",
        "for i in tl.range(0, SPLIT):",
        "    part = i * n_part + part_row",
        f'    lse = tl.load(PL + part, mask=row_ok, other={NEG_INF}, cache_modifier=".cg")',
        "    m_new = tl.maximum(m_c, lse)",
        f"    m_use = tl.where(m_new == {NEG_INF}, 0.0, m_new)",
        "    a = tl.exp2(m_c - m_use)",
        "    w = tl.exp2(lse - m_use)",
        '    po = tl.load(PO + part[:, None] * D_PAD + dims[None, :], mask=row_ok[:, None], other=0.0, '
        'cache_modifier=".cg")',
        "    o = o * a[:, None] + po * w[:, None]",
        "    den = den * a + w",
        "    m_c = m_new",
        "o = o / tl.where(den > 0, den, 1.0)[:, None]",
    ]


def _store_o(f: KernelFacts) -> str:
    return (f"tl.store(O + o_off[:, None] + dims[None, :], o.to(O.dtype.element_ty), "
            f"mask=row_ok[:, None]{f.d_mask('None, :')})")


def kernel_params(f: KernelFacts) -> list[str]:
    """The main kernel's parameters in order (runtime, then constexpr)."""
    parts = ["PO", "PL", "n_part"] if f.split > 1 else []
    parts += ["CNT"] if f.last_program else []
    consts = ["GROUP", "HEAD_DIM", "D_PAD", "BLOCK_M", "BLOCK_N"] + (["SPLIT"] if f.split > 1 else [])
    return (["Q", "K", "V", "O"] + parts + ["qk_scale", "sqb", "sqh", "sqm", "skb", "skh", "skn", "svb", "svh", "svn",
                                           "sob", "soh", "som", "n_q", "n_k", "n_tiles", "h_grid", "n_bh"]
            + [f"{c}: tl.constexpr" for c in consts])


def _work_item(f: KernelFacts) -> list[str]:
    """tile, bh (batch * h_grid + head) and split of this program (or, persistent, of its work item)."""
    g = f.g
    first, second = ("tile", "bh") if g["grid"] == "tiles_first" else ("bh", "tile")
    sizes = {"tile": "n_tiles", "bh": "n_bh"}
    if f.persistent:
        lines = [f"{first} = item % {sizes[first]}", f"{second} = (item // {sizes[first]}) % {sizes[second]}"]
        if f.split > 1:
            lines.append(f"split = item // ({sizes[first]} * {sizes[second]})")
    else:
        lines = [f"{first} = tl.program_id(0)", f"{second} = tl.program_id(1)"]
        if f.split > 1:
            lines.append("split = tl.program_id(2)")
    if g["q_order"] == "reverse":
        lines.append("tile = n_tiles - 1 - tile  # the last query tiles (the longest causal rows) first")
    return lines


def kernel_source(f: KernelFacts) -> list[str]:
    body = _work_item(f)
    body += ["b = bh // h_grid  # bh: batch * h_grid + head (the KV head when packed)", "hg = bh % h_grid",
             "rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)"]
    if f.pack:
        body += ["q_pos = rows // GROUP  # a row is a (query, head) pair of the heads sharing KV head hg",
                 "head = hg * GROUP + rows % GROUP",
                 "kvh = hg",
                 "row_ok = rows < n_q * GROUP",
                 "q_lo = (tile * BLOCK_M) // GROUP",
                 "q_hi = tl.minimum(((tile + 1) * BLOCK_M - 1) // GROUP, n_q - 1)"]
    else:
        body += ["q_pos = rows", "head = hg", "kvh = hg // GROUP", "row_ok = rows < n_q",
                 "q_lo = tile * BLOCK_M", "q_hi = tl.minimum(q_lo + BLOCK_M - 1, n_q - 1)"]
    body += ["b64 = b.to(tl.int64)",
             "q_off = b64 * sqb + head.to(tl.int64) * sqh + q_pos.to(tl.int64) * sqm",
             "o_off = b64 * sob + head.to(tl.int64) * soh + q_pos.to(tl.int64) * som",
             "dims = tl.arange(0, D_PAD)"]
    if f.padded_d:
        body.append("d_ok = dims < HEAD_DIM")
    body += [f"q = tl.load(Q + q_off[:, None] + dims[None, :], mask=row_ok[:, None]{f.d_mask('None, :')}, other=0.0)",
             "k_base = K + b64 * skb + kvh.to(tl.int64) * skh",
             "v_base = V + b64 * svb + kvh.to(tl.int64) * svh"]
    if f.tma:
        body += ["k_desc = tl.make_tensor_descriptor(k_base, shape=[n_k, HEAD_DIM], strides=[skn, 1], "
                 "block_shape=[BLOCK_N, D_PAD])",
                 "v_desc = tl.make_tensor_descriptor(v_base, shape=[n_k, HEAD_DIM], strides=[svn, 1], "
                 "block_shape=[BLOCK_N, D_PAD])"]
    if f.causal:
        body += ["hi = tl.minimum(n_k, q_hi + 1 + n_k - n_q)  # keys the tile's last query sees",
                 "full = tl.minimum(n_k // BLOCK_N, (q_lo + 1 + n_k - n_q) // BLOCK_N) * BLOCK_N  # seen by every row"]
    else:
        body += ["hi = n_k", "full = (n_k // BLOCK_N) * BLOCK_N"]
    if f.split > 1:
        body += ["per = tl.cdiv(tl.cdiv(hi, BLOCK_N), SPLIT) * BLOCK_N  # keys per split, whole blocks",
                 "lo = split * per",
                 "hi = tl.minimum(hi, lo + per)"]
    else:
        body.append("lo = 0")
    body += [f"m_i = tl.full([BLOCK_M], {NEG_INF}, tl.float32)",
             "l_i = tl.zeros([BLOCK_M], tl.float32)",
             "acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)"]
    body += _loops(f)
    if f.split == 1:
        body += ["o = acc / l_i[:, None]", _store_o(f)]
    else:
        hq = "h_grid * GROUP" if f.pack else "h_grid"
        body += [f"part_row = (b64 * ({hq}) + head) * n_q + q_pos",
                 "l_safe = tl.where(l_i > 0, l_i, 1.0)  # a split whose keys no row sees",
                 f"lse = tl.where(l_i > 0, m_i + tl.log2(l_safe), {NEG_INF})",
                 "part = split * n_part + part_row",
                 "tl.store(PL + part, lse, mask=row_ok)",
                 "tl.store(PO + part[:, None] * D_PAD + dims[None, :], acc / l_safe[:, None], mask=row_ok[:, None])"]
        if f.last_program:
            body += ["tl.debug_barrier()  # every thread's partial is written before the ticket is taken",
                     "ticket = tl.atomic_add(CNT + bh * n_tiles + tile, 1)  # acq_rel: the others' partials are seen",
                     "if ticket == SPLIT - 1:  # the tile's last program combines; nothing ever waits",
                     *["    " + x for x in _combine("BLOCK_M") + [_store_o(f)]],
                     "    tl.atomic_xchg(CNT + bh * n_tiles + tile, 0)  # ready for the next call (CUDA graphs too)"]
    if f.persistent:
        body = (["for item in tl.range(tl.program_id(0), n_tiles * n_bh * " + ("SPLIT" if f.split > 1 else "1")
                 + ", tl.num_programs(0)):  # persistent: this program's work items"]
                + ["    " + x for x in body])
    return jit_def("attention_kernel", kernel_params(f)) + ["    " + x for x in body]


def combine_source(f: KernelFacts) -> list[str]:
    """The second launch of reduce=launch: each program combines COMBINE_ROWS rows' partials into the output."""
    body = ["part_row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)",
            "row_ok = part_row < n_part",
            "q_pos = part_row % n_q",
            "head = (part_row // n_q) % n_heads",
            "b = part_row // (n_q * n_heads)",
            "o_off = b * sob + head * soh + q_pos * som",
            "dims = tl.arange(0, D_PAD)"]
    if f.padded_d:
        body.append("d_ok = dims < HEAD_DIM")
    body += _combine("ROWS") + [_store_o(f)]
    params = ["PO", "PL", "O", "n_part", "n_q", "n_heads", "sob", "soh", "som",
              "HEAD_DIM: tl.constexpr", "D_PAD: tl.constexpr", "SPLIT: tl.constexpr", "ROWS: tl.constexpr"]
    return jit_def("attention_combine", params) + ["    " + x for x in body]

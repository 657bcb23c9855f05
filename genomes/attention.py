"""The attention genome: O = softmax(Q K^T * scale) V over [batch, heads, length, head_dim] tensors, causal or not,
with query heads sharing key/value heads (GQA, MQA).

One program computes a tile of BLOCK_M query rows against the keys in BLOCK_N-wide steps (the online softmax
of FlashAttention), holding the fp32 output tile and one tile of scores in registers and pipelining the K and
V loads through shared memory (num_stages deep). The genes beyond the tiles decide the structure:
- `pack_gqa`: the rows of a tile are (query, head) pairs of the query heads that share one KV head, so those
  heads read K and V once (what decode needs: one query row per head would fill 1 of 16 rows of a tile);
- `kv_split`: the keys of one tile are split over several programs (flash-decoding), each writing a partial
  output and its log-sum-exp, combined by a second launch (`reduce: launch`) or by the last program of the
  tile to finish (`reduce: last_program`, an atomic counter; no second launch, nothing waits on anyone);
- `mask_loop`: every key block masked, or the blocks that no row of the tile masks (below the causal
  diagonal, inside the key length) run a loop without the mask and only the rest a masked one;
- `q_order` and `grid`: the order the programs are issued in (the longest causal rows first; the tiles of
  one head together, sharing K and V in L2, or the heads of one tile together).

`backend` renders the kernel with Triton's `tl` or with Gluon, whose warp roles (a TMA producer warp, one or two
wgmma consumer warp groups, `consumers`, `overlap` and `pingpong`) are FlashAttention-3's (genomes/attention_gluon.py).

Validity keeps what can run: tiles of at least 16 (tl.dot), the fp32 values a thread keeps within its
registers, the pipelined loads within shared memory, packing only where heads share a KV head. More key
splits than key blocks, or tiles taller than the queries, are wasteful but valid (a split without keys
writes an empty partial), so a genome stays valid for a shorter problem (a transferred elite, a clipped
smoke-test problem); random draws and repair aim at the sensible forms (soft rules). The rules are one table,
each a check and its fix, that violations() and repair() both read (genomes/attention_rules.py). The head dimension
(any size; the kernel pads it to a power of two) comes from the problem.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes import labels
from genomes.attention_gluon import GLUON_FIXED, MIN_GLUON_ROWS
from genomes.attention_resources import (
    ELEM_BYTES,
    MAX_LIVE,
    group,
    head_dim_pad,
    key_blocks,
    live_limit,
    live_values,
    next_pow2,
    smem_estimate,
    tile_rows,
)
from genomes.attention_rules import PLAN, model_switches, rules
from genomes.base import Descriptor, Genome, GenomeFamily
from genomes.genes import Boolean, Categorical, Gene, IntChoice, PowerOfTwo
from genomes.rule_table import plan_repair, table_violations

__all__ = ["AttentionFamily", "ELEM_BYTES", "head_dim_pad", "tile_rows", "key_blocks", "MAX_LIVE", "live_limit"]

def _structure(g: dict[str, Any], r: Any) -> float:
    if g["backend"] == "gluon":
        return 7.0 if g["consumers"] == 3 else 4.0 + (g["consumers"] == 2) + g["pingpong"]
    return float(g["pack_gqa"]) + 2.0 * (g["kv_split"] > 1)


class AttentionFamily(GenomeFamily):
    name = "attention"

    def _genes(self) -> list[Gene]:
        return [
            PowerOfTwo("BLOCK_M", 16, 256, group="tile",
                       doc="query rows per program (with pack_gqa: (query, head) rows)"),
            PowerOfTwo("BLOCK_N", 16, 256, group="tile", doc="keys per step of the loop over the keys"),
            IntChoice("num_warps", (2, 4, 8, 16), group="launch", doc="warps per program"),
            IntChoice("num_stages", (1, 2, 3, 4, 5), group="launch",
                      doc="software pipelining depth of the K and V loads of the key loop"),
            Boolean("pack_gqa", group="structure",
                    doc="one tile holds the query heads that share a KV head, which then read K and V once"),
            PowerOfTwo("kv_split", 1, 64, group="split",
                       doc="programs sharing one tile's keys (flash-decoding); 1 = one program per tile"),
            Categorical("reduce", ("launch", "last_program"), group="split",
                        doc="kv_split > 1: partials combined by a second launch, or by the tile's last program"),
            Categorical("mask_loop", ("split", "masked"), group="structure",
                        doc="key blocks no row masks run without the mask (split), or every block is masked"),
            Categorical("q_order", ("forward", "reverse"), group="order",
                        doc="query tiles issued first to last, or last first (the longest causal rows first)"),
            Categorical("grid", ("tiles_first", "heads_first"), group="order",
                        doc="programs issued tile by tile of one head (K and V shared in L2) or head by head"),
            Categorical("kv_load", ("pointer", "tma"), group="memory",
                        doc="K and V tiles loaded through pointers, or through tensor descriptors made in the kernel "
                            "(TMA: no address arithmetic, rows past the end read as zeros)"),
            IntChoice("persistent", (0, 1, 2), group="order",
                      doc="programs per SM of a persistent grid looping over the work items in issue order; "
                          "0 = one program per work item"),
            Categorical("backend", ("triton", "gluon"), group="structure", implied=("triton",),
                        doc="the kernel rendered with Triton's tl, or with Gluon: a TMA producer warp and wgmma "
                            "consumer warp groups (genomes/attention_gluon.py)"),
            IntChoice("consumers", (1, 2, 3), group="launch", implied=(1,),
                      doc="Gluon: MMA consumer partitions per program, each owning BLOCK_M query rows and sharing "
                          "the K/V stream"),
            Boolean("overlap", group="structure", implied=(False,),
                    doc="Gluon: block j's scores issued before block j-1's P V, its softmax run under that wgmma"),
            Boolean("pingpong", group="structure", implied=(False,),
                    doc="Gluon, two consumers with overlap: they take turns issuing their products, one's softmax "
                        "under the other's wgmma"),
        ]

    # -- resources ------------------------------------------------------------------------------------
    live_values = staticmethod(live_values)
    smem_estimate = staticmethod(smem_estimate)

    # -- validity and repair: one rule table (genomes/attention_rules.py) -----------------------------------
    def violations(self, genome: Genome, problem: Problem, target: Target) -> list[str]:
        try:
            g = genome.as_dict()
            if set(g) != set(self.genes):
                return [f"genes {sorted(set(g) ^ set(self.genes))} do not match family {self.name}"]
        except Exception as e:  # noqa: BLE001 - a malformed genome is a violation, not a crash
            return [f"malformed genome: {e}"]
        if problem.dims["heads"] % problem.dims["kv_heads"]:  # the problem's own rule: no genome runs it
            return [f"{problem.dims['heads']} query heads are not a multiple of {problem.dims['kv_heads']} KV heads"]
        return table_violations(rules(self), g, problem, target)

    def repair(self, genome: Genome, problem: Problem, target: Target, rng: np.random.Generator) -> Genome:
        g = plan_repair(self, rules(self), PLAN, genome.as_dict(), problem, target)
        return self._repaired(g, genome, problem, target)

    # -- seeds and descriptors ------------------------------------------------------------------------
    def base(self, **values: Any) -> dict[str, Any]:
        """FlashAttention-2's forward as Triton writes it: 128x64 tiles, 8 warps, 3 stages; updated by `values`."""
        g = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "pack_gqa": False, "kv_split": 1,
             "reduce": "launch", "mask_loop": "split", "q_order": "forward", "grid": "tiles_first",
             "kv_load": "pointer", "persistent": 0, "backend": "triton", "consumers": 1, "overlap": False,
             "pingpong": False}
        g.update(values)
        return g

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        """Prefill tiles (Triton's tutorial's and TMA, persistent and ordered variants) and decode genomes (the
        heads of a group packed, the keys split so that every SM works). For short queries (one row block per KV
        head) the decode genomes come first: a search cut short by its wall clock starts with them (a llama-3-8b
        zoo search at 1 query over 4097 keys spent 13 of its 15 evaluations on the prefill seeds, at 2-3x the
        time of the decode ones)."""
        prefill = [self.base(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=s)
                   for m, n, w, s in ((128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3), (64, 64, 4, 3),
                                      (128, 32, 4, 4), (64, 128, 4, 2), (256, 64, 16, 2))]
        prefill += [self.base(q_order="reverse"), self.base(mask_loop="masked")]
        # TMA loads of K and V (as Triton's Hopper tutorial kernel), and persistent grids issuing the longest first
        prefill += [self.base(kv_load="tma"), self.base(BLOCK_N=128, num_stages=2, kv_load="tma"),
                    self.base(kv_load="tma", persistent=1, q_order="reverse"),
                    self.base(persistent=2, q_order="reverse")]
        rows = problem.dims["q_len"] * group(problem)
        programs = problem.dims["batch"] * problem.dims["kv_heads"] * max(1, -(-rows // 64))
        split = max(1, min(64, next_pow2(max(1, 2 * target.num_sms // max(1, programs)))))
        # one launch whose last program of a tile combines its splits before two launches (faster in that search)
        decode = [self.base(BLOCK_M=16, BLOCK_N=n, num_warps=w, num_stages=3, pack_gqa=True, kv_split=split,
                            reduce=r) for r in ("last_program", "launch") for n, w in ((64, 4), (128, 4), (128, 8))]
        decode += [self.base(BLOCK_M=64, BLOCK_N=64, num_warps=4, pack_gqa=True, kv_split=max(1, split // 2))]
        raw = decode + prefill if rows <= 64 else prefill + decode
        # FlashAttention-3's forms: warp roles through Gluon (which has no logit cap or window)
        if problem.dims["q_len"] >= MIN_GLUON_ROWS and not model_switches(problem):
            gluon = dict(GLUON_FIXED, backend="gluon")
            order = "reverse" if "causal" in problem.operator.split("+") else "forward"  # longest rows first
            raw = [self.base(**gluon, BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=s, consumers=c, overlap=o,
                             pingpong=pp, persistent=ps, q_order=order)
                   # (measured on an H100 at 8k tokens, head dim 128: the first was the best of 30 Gluon genomes;
                   # on an H200 it still beat ping-pong and the persistent grid. Three consumers, 192 query rows
                   # sharing each K/V tile, are FlashAttention-3's head-dim-64 form: correct on an H200, not
                   # the elite of either head-dim-64 bench shape there)
                   for m, n, w, s, c, o, pp, ps in (
                       (64, 128, 4, 3, 2, True, False, 0), (64, 128, 4, 3, 2, True, True, 0),
                       (64, 64, 4, 3, 3, True, False, 0), (64, 128, 4, 3, 3, False, False, 0),
                       (64, 128, 4, 3, 2, True, False, 1), (64, 128, 4, 3, 2, True, True, 1),
                       (64, 128, 4, 2, 2, True, False, 0), (64, 128, 4, 2, 2, False, False, 0),
                       (128, 128, 8, 2, 1, False, False, 0), (64, 64, 4, 4, 2, True, True, 0),
                       (128, 64, 8, 3, 1, False, False, 0))] + raw
        return self._repaired_seeds(raw, problem, target)

    def descriptors(self) -> dict[str, Descriptor]:
        log2 = lambda x: float(np.log2(x))
        return {
            "tile": Descriptor("tile", lambda g, r: log2(g["BLOCK_M"] * g["BLOCK_N"]),
                               tuple(float(x) for x in range(8, 17)), "log2(BLOCK_M x BLOCK_N)", label=labels.tile),
            "block_m": Descriptor("block_m", lambda g, r: log2(g["BLOCK_M"]), tuple(float(x) for x in range(4, 9)),
                                  "log2(query rows per program)", label=labels.power_of_two),
            "kv_split": Descriptor("kv_split", lambda g, r: log2(g["kv_split"]), tuple(float(x) for x in range(7)),
                                   "log2(programs sharing a tile's keys)", label=labels.power_of_two),
            "memory": Descriptor("memory", lambda g, r: float(g["kv_load"] == "tma") + 2.0 * (g["persistent"] > 0),
                                 (0.0, 1.0, 2.0, 3.0), "0 pointers, 1 TMA, 2 persistent, 3 TMA + persistent",
                                 label=labels.categories(("pointers", "TMA", "persistent", "TMA+persistent"))),
            "structure": Descriptor(
                "structure", _structure, (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0),
                "0 plain, 1 GQA packed, 2 split keys, 3 both, 4 Gluon warp roles, 5 Gluon with two consumers, "
                "6 Gluon ping-pong, 7 Gluon with three consumers",
                label=labels.categories(("plain", "GQA packed", "split keys", "packed+split", "Gluon",
                                         "Gluon 2 consumers", "Gluon ping-pong", "Gluon 3 consumers"))),
            "num_warps": Descriptor("num_warps", lambda g, r: log2(g["num_warps"]),
                                    tuple(float(x) for x in range(1, 5)),
                                    "log2(warps)", label=labels.power_of_two),
            "registers": Descriptor("registers", lambda g, r: r["registers"],
                                    (0.0, 64.0, 96.0, 128.0, 168.0, 232.0), "registers per thread",
                                    needs_resources=True),
        }

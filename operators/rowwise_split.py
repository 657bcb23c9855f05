"""Rendering row-wise kernels that spread one row over SPLIT programs (genes split > 1, genomes/rowwise_split.py).

Chunk c of a row holds columns [c * CHUNK, (c + 1) * CHUNK) of it, CHUNK = cdiv(cdiv(N, SPLIT), 64) * 64 (a
chunk past the row's end is empty: its partials are the operator's neutral values). An operator supplies the
arithmetic (`SplitMath`): which fp32 partial statistics a chunk yields, how a tile or a loop of tiles computes
them, how a row's SPLIT partials combine, and how a tile is written.

two_launch: `<op>_partials` on an (M, SPLIT) grid writes each chunk's partials into the workspace part[M, P, SPLIT]
(fp32, allocated once per plan); `<op>_kernel` on the same grid loads the row's SPLIT partials, combines them and
writes its chunk. No program waits on another.

cooperative: one launch of G * SPLIT programs, program p taking chunk p % SPLIT of rows p // SPLIT, + G, + 2G, ...:
the SPLIT programs of a group always work on the same row at the same time. Each loads its chunk into registers,
stores its partials, then arrives at the row's counter (an atomic add, release) and waits (acquire loads) until
the row's SPLIT programs have arrived; it then loads the partials, combines them and writes its chunk from
registers: x is read once.

Why no launch can hang:
  * Residency: the launcher compiles the kernel first and caps G at what is resident at once (registers, shared
    memory, threads per SM times SMs: evo/launch/runtime.py, resident_programs), so every program a program waits
    for is running: groups wait only within themselves, and a group's SPLIT programs reach each row together.
    It refuses (ValueError) a GPU on which fewer than SPLIT programs fit; the validity rules keep SPLIT within the
    SMs (one program per SM always fits a kernel that compiles).
  * Bounded waiting: residency can still fail where the launcher cannot see it (an MPS or green-context share of
    the SMs, another stream's persistent kernel). So a program waits at most MAX_SPINS polls; past that it
    computes the row's statistics itself, reading the whole row from memory: slower, the same result, and it
    still arrived, so the counters stay consistent. Under the CPU interpreter, which runs programs one after
    another, the launcher passes max_spins = 0: programs whose partners have not run yet take that path.
  * Counters never need resetting: they only grow. A program's ticket t = atomic_add(count, 1) names its
    generation (t // SPLIT; SPLIT is a power of two, so generations stay aligned when the int32 wraps) and it
    waits for count - (t // SPLIT + 1) * SPLIT >= 0, compared as a wrapping difference. Every launch adds exactly
    SPLIT per row, so the next launch (or a CUDA graph replay) starts at a generation boundary. Zeroed once per
    plan, no zeroing pass per call.
The workspace and counters belong to the plan (one per argument signature): calls on two streams at once with
the same signature would share them, as they share any other preallocated buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from evo.problem import Problem, Target
from genomes.rowwise_split import CHUNK_ALIGN
from operators.rowwise import RowwiseOperator, Skeleton, load, store

__all__ = ["SplitMath", "render_split", "MAX_SPINS"]

MAX_SPINS = 1 << 18  # polls of the arrival counter (~0.1-0.3 s on a GPU) before computing the row's stats alone


@dataclass(frozen=True)
class SplitMath:
    """One operator's arithmetic in a split kernel. Tiles are 1-D [BLOCK] fp32 (after `convert`); `cols` and
    `mask` name the tile's columns of the row and which of them exist."""

    parts: tuple[str, ...]  # partial statistics per chunk: fp32 scalars <p>_part, loaded back as vectors part_<p>
    empty: tuple[str, ...]  # each one's value for an empty chunk
    other: str  # fill of x's masked lanes
    convert: str  # the fp32 tile from a loaded tile "{t}"
    chunk_stats: Callable[[str], list[str]]  # tile -> lines setting <p>_part
    running: Callable[[str, bool], tuple[list[str], list[str], list[str]]]  # (tile, per lane) -> init, step, final
    combine: list[str]  # part_<p> vectors [SPLIT] -> the row's statistics
    apply: Callable[[str], list[str]]  # tile -> lines setting y
    apply_kept: list[str]  # cooperative: y from what chunk_stats("x") left alive
    inputs: tuple[str, ...] = ()  # tensor parameters besides x and y, e.g. ("w_ptr",)
    scalars: tuple[str, ...] = ()  # scalar parameters of the writing kernels, e.g. ("eps",)


def _indent(lines: list[str], depth: int = 1) -> list[str]:
    return ["    " * depth + line for line in lines]


def _signature(name: str, runtime: list[str], sk: Skeleton) -> list[str]:
    return sk.signature(name, ", ".join(runtime), ("N_COLS", "SPLIT", "CHUNK", "BLOCK"))


def _chunk_tile(sk: Skeleton, math: SplitMath, hint: str, body: list[str]) -> list[str]:
    """The chunk's columns as one tile (single) or BLOCK-wide steps (looped), x loaded and converted, then `body`."""
    read = [f"x = {load('x_ptr + row_start + cols', 'mask', math.other, hint)}", f"x = {math.convert.format(t='x')}"]
    if sk.single:
        return ["lane = tl.arange(0, BLOCK)", "cols = chunk * CHUNK + lane",
                "mask = (lane < CHUNK) & (cols < N_COLS)"] + read + body
    head = [f"for start in tl.range(0, CHUNK, BLOCK{sk.loop_stages}):",
            "    lane = start + tl.arange(0, BLOCK)",
            "    cols = chunk * CHUNK + lane",
            "    mask = (lane < CHUNK) & (cols < N_COLS)"]
    return head + _indent(read + body)


def _store_parts(math: SplitMath, base: str) -> list[str]:
    return [f"tl.store({base} + {i} * SPLIT, {p}_part)" for i, p in enumerate(math.parts)]


def _load_parts(math: SplitMath, base: str, modifier: str = "") -> list[str]:
    extra = f', cache_modifier="{modifier}"' if modifier else ""
    return [f"part_{p} = tl.load({base} + {i} * SPLIT + offs{extra})" for i, p in enumerate(math.parts)]


def _partials_kernel(name: str, sk: Skeleton, math: SplitMath, per_lane: bool) -> list[str]:
    g = sk.g
    if sk.single:
        body = _chunk_tile(sk, math, g["keep_x"], math.chunk_stats("x"))
    else:
        init, step, final = math.running("x", per_lane)
        body = init + _chunk_tile(sk, math, g["keep_x"], step) + final
    lines = ["row = tl.program_id(0)",
             "chunk = tl.program_id(1)",
             "row_start = row.to(tl.int64) * N_COLS  # 64-bit: M * N may exceed 2**31",
             *body,
             f"part = part_ptr + row.to(tl.int64) * {len(math.parts)} * SPLIT + chunk",
             *_store_parts(math, "part")]
    return _signature(name, ["x_ptr", "part_ptr"], sk) + _indent(lines)


def _writing_kernel(name: str, sk: Skeleton, math: SplitMath) -> list[str]:
    write = math.apply("x") + [store("y_ptr + row_start + cols", "y.to(y_ptr.dtype.element_ty)", sk.g["store_y"])]
    lines = ["row = tl.program_id(0)",
             "chunk = tl.program_id(1)",
             "row_start = row.to(tl.int64) * N_COLS  # 64-bit: M * N may exceed 2**31",
             "offs = tl.arange(0, SPLIT)",
             f"part = part_ptr + row.to(tl.int64) * {len(math.parts)} * SPLIT",
             *_load_parts(math, "part"),
             *math.combine,
             *_chunk_tile(sk, math, sk.g["evict_x"], write)]
    runtime = ["x_ptr", *math.inputs, "y_ptr", "part_ptr", *math.scalars]
    return _signature(name, runtime, sk) + _indent(lines)


def _cooperative_kernel(name: str, sk: Skeleton, math: SplitMath) -> list[str]:
    init, step, final = math.running("xs", False)
    fallback = [*init,
                "for start in tl.range(0, N_COLS, BLOCK):",
                "    cols_all = start + tl.arange(0, BLOCK)",
                f"    xs = {load('x_ptr + row_start + cols_all', 'cols_all < N_COLS', math.other, 'none')}",
                f"    xs = {math.convert.format(t='xs')}",
                *_indent(step),
                *final,
                *[f"part_{p} = tl.where(offs == 0, {p}_part, {e})" for p, e in zip(math.parts, math.empty,
                                                                                   strict=True)]]
    evict = sk.g["evict_x"]
    prefetch = _prefetches(sk)
    first = "x = x_next" if prefetch else f"x = {load('x_ptr + row_start + cols', 'mask', math.other, evict)}"
    row = [first,
           f"x = {math.convert.format(t='x')}",
           *math.chunk_stats("x"),
           f"part = part_ptr + row64 * {len(math.parts)} * SPLIT",
           *_store_parts(math, "part + chunk"),
           "# arrive (release: after every thread's stores), then wait for the row's SPLIT arrivals of this launch",
           "tl.debug_barrier()",
           'ticket = tl.atomic_add(count_ptr + row, 1, sem="release")',
           *(["# the next row's chunk is loaded while this row's partners arrive (its loads overlap the wait)",
              "row_next = row + tl.num_programs(0) // SPLIT",
              "mask_next = mask & (row_next + 0 * lane < n_rows)  # a tile: the interpreter masks with tiles only",
              "x_next = " + load("x_ptr + tl.cast(row_next, tl.int64) * N_COLS + cols", "mask_next", math.other,
                                 evict)] if prefetch else []),
           "goal = ticket - (ticket & (SPLIT - 1)) + SPLIT  # the end of this launch's generation",
           'seen = tl.atomic_add(count_ptr + row, 0, sem="acquire")',
           "spins = 0",
           "while ((seen - goal) < 0) & (spins < max_spins):  # a wrapping difference: int32 counters may wrap",
           '    seen = tl.atomic_add(count_ptr + row, 0, sem="acquire")',
           "    spins += 1",
           "tl.debug_barrier()",
           "if (seen - goal) >= 0:",
           *_indent(_load_parts(math, "part", ".cg")),
           "else:  # waited too long: the row's statistics from the whole row, read again",
           *_indent(fallback),
           *math.combine,
           *math.apply_kept,
           store("y_ptr + row_start + cols", "y.to(y_ptr.dtype.element_ty)", sk.g["store_y"])]
    head = ["mask_next = mask & (row_first + 0 * lane < n_rows)",
            "x_next = " + load("x_ptr + tl.cast(row_first, tl.int64) * N_COLS + cols", "mask_next", math.other, evict)
            ] if prefetch else []
    lines = ["chunk = tl.program_id(0) % SPLIT",
             "offs = tl.arange(0, SPLIT)",
             "lane = tl.arange(0, BLOCK)",
             "cols = chunk * CHUNK + lane",
             "mask = (lane < CHUNK) & (cols < N_COLS)",
             "row_first = tl.program_id(0) // SPLIT",
             *head,
             "for row in tl.range(row_first, n_rows, tl.num_programs(0) // SPLIT):",
             "    row64 = tl.cast(row, tl.int64)  # 64-bit: M * N may exceed 2**31",
             "    row_start = row64 * N_COLS",
             *_indent(row)]
    runtime = ["x_ptr", *math.inputs, "y_ptr", "part_ptr", "count_ptr", "n_rows", "max_spins", *math.scalars]
    return _signature(name, runtime, sk) + _indent(lines)


def _prefetches(sk: Skeleton) -> bool:
    """Whether a cooperative kernel loads its next row's chunk before waiting on this row's partners: asked for by
    num_stages >= 2 (the cooperative kernel has no pipelined loop of its own for the gene to mean otherwise)."""
    return sk.g["num_stages"] >= 2


def split_kernels(op_name: str, kernel_name: str, sk: Skeleton, math: SplitMath, per_lane: bool) -> list[str]:
    """The @triton.jit kernels of a split genome: partials and writing kernels, or the cooperative kernel."""
    if sk.g["split_mode"] == "cooperative":
        return _cooperative_kernel(kernel_name, sk, math)
    return _partials_kernel(f"{op_name}_partials", sk, math, per_lane) + ["", ""] + _writing_kernel(
        kernel_name, sk, math)


def split_setup(op_name: str, kernel_name: str, sk: Skeleton, math: SplitMath, tensors: tuple[str, ...],
                options: str) -> tuple[list[str], list[str]]:
    """The plan's set-up lines and the run's launch lines (RowwiseOperator.module_tail's `setup` and `launch`)."""
    consts = "n_cols, SPLIT, chunk, block" + (", NUM_STAGES" if sk.pipelined else "")
    inputs = "".join(f"{t}, " for t in tensors[1:])
    scalars = "".join(f", {s}" for s in math.scalars)
    setup = [f"    # SPLIT chunks of `chunk` columns per row, each starting on a {CHUNK_ALIGN}-column boundary",
             f"    chunk = triton.cdiv(triton.cdiv(n_cols, SPLIT), {CHUNK_ALIGN}) * {CHUNK_ALIGN}"]
    setup.append("    block = BLOCK if chunk <= BLOCK else triton.next_power_of_2(chunk)" if sk.single else
                 "    block = BLOCK")
    setup.append(f"    part = torch.empty((n_rows, {len(math.parts)}, SPLIT), dtype=torch.float32, device=x.device)"
                 "  # partials per chunk")
    if sk.g["split_mode"] == "two_launch":
        setup += [f"    partials = BoundKernel({op_name}_partials, (n_rows, SPLIT), {options})",
                  f"    kernel = BoundKernel({kernel_name}, (n_rows, SPLIT), {options})"]
        launch = [f"            partials(x, part, {consts})",
                  f"            kernel(x, {inputs}out, part{scalars}, {consts})"]
        return setup, launch
    warm = ", 1e-6" * len(math.scalars)  # any value: float arguments are not specialised
    setup += [
        "    count = torch.zeros(n_rows, dtype=torch.int32, device=x.device)  # arrivals per row: they only grow",
        "    # the interpreter runs programs one at a time: none may wait for a later one",
        '    max_spins = 0 if x.device.type == "cpu" else MAX_SPINS',
        '    if x.device.type == "cuda":  # every program resident at once: at most what fits on this GPU',
        "        y = out if out is not None else x.new_empty(1)",
        f"        args = (x, {inputs}y, part, count, n_rows, max_spins{warm}, {consts})",
        f"        fits = resident_programs({kernel_name}, args, {{\"num_warps\": NUM_WARPS}}, x.device)",
        "    else:  # compiling ahead on the meta device (the grid does not matter) or interpreting",
        "        fits = 2 * SPLIT",
        "    groups = cooperative_groups(fits, SPLIT, n_rows)",
        f"    kernel = BoundKernel({kernel_name}, (groups * SPLIT,), {{\"num_warps\": NUM_WARPS}})",
    ]
    launch = [f"            kernel(x, {inputs}out, part, count, n_rows, max_spins{scalars}, {consts})"]
    return setup, launch


def render_split(op: RowwiseOperator, sk: Skeleton, problem: Problem, target: Target, math: SplitMath,
                 per_lane: bool, head: list[str], tensors: tuple[str, ...], checks: list[str],
                 scalars: str = "") -> str:
    """The standalone module of a split genome: header, kernels, plan and entry (the entry's signature is the
    one-program-per-row kernels')."""
    g = sk.g
    if g["split_mode"] == "cooperative":
        summary = (f"Split, cooperative: {g['split']} programs per row, each holding its chunk in registers, wait for "
                   "the row's partial statistics and write; x is read once.")
        extra = [f"MAX_SPINS = {MAX_SPINS}  # polls of a row's arrival counter before computing its stats alone"]
    else:
        summary = (f"Split over two launches: {g['split']} programs per row compute partial statistics of their "
                   "chunk, then combine the row's and write their chunk.")
        extra = []
    lines = op.header(sk, problem, target, summary)[:-2]
    lines += [f"SPLIT = {g['split']}  # programs per row", *extra, "", ""]
    lines += split_kernels(op.name, op.kernel_name, sk, math, per_lane)
    setup, launch = split_setup(op.name, op.kernel_name, sk, math, tensors, op.launch_options(sk))
    lines += ["", ""] + op.module_tail(sk, head, tensors, checks, "", scalars, setup=setup, launch=launch,
                                       inspect=["    run.workspace = part, count" if "count" in launch[-1] else
                                                "    run.workspace = part,"])
    return "\n".join(lines) + "\n"

"""Each GEMM gene changes the rendered source in the intended way, and only genes that are on leave code."""

from __future__ import annotations

import ast
import re

import pytest

import operators
from evo.launch import runtime_source
from evo.problem import HOPPER

OP = operators.get("gemm")
FAMILY = OP.family
PROBLEM = OP.problem((256, 256, 512), "fp16")  # aligned and large enough for every feature
PLAIN = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, loop_stages=0, loop_unroll=1)


def src(**values) -> str:
    return OP.render(FAMILY.make(FAMILY.base(**{**PLAIN, **values})), PROBLEM, HOPPER)


def code(source: str) -> str:
    """The source without its docstring (which names every gene, on or off) and the launch runtime every
    rendered module carries (evo/launch/runtime.py)."""
    return source[source.index('"""', 3) + 3:].replace(runtime_source(), "")


def launch_call(source: str) -> str:
    """The plan's bound launch: the kernel's arguments, positional, constexprs last."""
    start = source.index("        kernel(\n")
    return source[start:source.index("\n        )", start)]


def kernel_body(source: str) -> str:
    start = source.index("def matmul_kernel(")
    return source[start:source.index("\n\n\n", start)]


def test_plain_genome_has_no_optional_feature():
    s = src()
    ast.parse(s)
    s = code(s)
    for absent in ("SPLIT_K", "atomic", "num_sms", "tl.split", "make_tensor_descriptor", "set_allocator",
                   "warp_specialize", "LOOP_STAGES", "LOOP_UNROLL", "flatten", "GROUP_M", "tl.range",
                   "make_block_ptr", "debug_barrier"):
        assert absent not in s, absent
    assert "for ki in range(0, k_full):" in s
    # features are chosen by the renderer, never by constexpr branches inside the kernel
    assert not re.search(r"^\s*if [A-Z_]+", kernel_body(s), re.M)
    assert s.count("BoundKernel(matmul_kernel, grid,") == 1 and s.count("    kernel(\n") == 1


@pytest.mark.parametrize("values", [
    dict(), dict(split_k=4), dict(persistent=True), dict(memory="descriptor", epilogue_subtile=True),
    dict(memory="descriptor", warp_specialize=True, num_warps=4, loop_stages=3, GROUP_M=8),
    dict(loop_stages=3, loop_unroll=2, GROUP_M=4, raster="col"),
    dict(memory="host_descriptor", persistent=True, epilogue_subtile=True, GROUP_M=8),
    dict(memory="host_descriptor", split_k=4, loop_stages=2),
    dict(persistent=True, stream_k=True, GROUP_M=4), dict(memory="host_descriptor", persistent=True, stream_k=True),
])
def test_every_constant_is_used_and_passed_as_constexpr(values):
    s = src(**values)
    constants = re.findall(r"^([A-Z][A-Z_]*) = \d+", s, re.M)
    assert constants[:3] == ["BLOCK_M", "BLOCK_N", "BLOCK_K"] and {"NUM_WARPS", "NUM_STAGES"} <= set(constants)
    launch = launch_call(s)
    for name in constants:
        if name in ("NUM_WARPS", "NUM_STAGES"):
            assert f'"{name.lower()}": {name}' in s
        elif name == "SK_MAX_PARTS":  # the launcher's own: it sizes the stream-K share
            assert "triton.cdiv(k_tiles, SK_MAX_PARTS)" in s
        else:
            assert f"{name}: tl.constexpr" in s and re.search(rf"\b{name},", launch), name
    # constexprs are passed in the order the kernel declares them
    declared = re.findall(r"(\w+): tl.constexpr", kernel_body(s)[:kernel_body(s).index("):")])
    assert launch.replace(" ", "").replace("\n", "").endswith(",".join(declared) + ",")


def test_tile_and_launch_genes_set_the_constants():
    s = src(BLOCK_M=128, BLOCK_N=32, BLOCK_K=16, num_warps=8, num_stages=5)
    for line in ("BLOCK_M = 128", "BLOCK_N = 32", "BLOCK_K = 16", "NUM_WARPS = 8", "NUM_STAGES = 5"):
        assert re.search(rf"^{line}\b", s, re.M), line
    assert '{"num_warps": NUM_WARPS, "num_stages": NUM_STAGES}' in s


def test_group_m_and_raster_change_the_tile_order():
    row, col = src(), src(raster="col")
    assert "pid_m = tile_id // num_pid_n" in row and "pid_n = tile_id // num_pid_m" in col
    grouped_row, grouped_col = src(GROUP_M=8), src(GROUP_M=8, raster="col")
    assert re.search(r"^GROUP_M = 8\b", grouped_row, re.M)
    assert "tiles_per_group = GROUP_M * num_pid_n" in grouped_row and "pid_n = local // group_rows" in grouped_row
    assert "tiles_per_group = GROUP_M * num_pid_m" in grouped_col and "pid_m = local // group_cols" in grouped_col
    assert "tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)" in grouped_col


def test_loop_genes_add_hints_to_the_k_loop():
    assert "for ki in tl.range(0, k_full, num_stages=LOOP_STAGES):" in src(loop_stages=3)
    assert re.search(r"^LOOP_STAGES = 3\b", src(loop_stages=3), re.M)
    assert "for ki in tl.range(0, k_full, loop_unroll_factor=LOOP_UNROLL):" in src(loop_unroll=4)
    ws = src(memory="descriptor", warp_specialize=True, num_warps=4, loop_stages=2)
    assert "for ki in tl.range(0, k_tiles, num_stages=LOOP_STAGES, warp_specialize=True):" in ws


def test_persistent_adds_the_tile_loop_over_the_sms():
    s = src(persistent=True)
    assert "for tile_id in tl.range(tl.program_id(0), num_tiles, num_sms, flatten=True):" in s
    assert "multi_processor_count" in s and "grid = (min(num_sms, num_tiles),)" in s
    # the K loop and the epilogue sit inside the tile loop
    assert "\n        for ki in range(0, k_full):" in s and "\n        tl.store(c_ptrs" in s


def test_descriptor_memory_replaces_pointer_masks_with_tensor_descriptors():
    pointer, desc = kernel_body(src()), kernel_body(src(memory="descriptor"))
    assert "mask=" in pointer and "make_tensor_descriptor" not in pointer
    assert desc.count("tl.make_tensor_descriptor(") == 3 and "mask=" not in desc and "tl.where" not in desc
    assert "a_desc.load([off_m, ki * BLOCK_K])" in desc and "c_desc.store(" in desc
    assert "scratch=True)" in code(src(memory="descriptor")) and "scratch=True" not in code(src())


def test_host_descriptor_memory_builds_tensor_descriptors_in_the_launcher():
    s = src(memory="host_descriptor")
    body, launcher = kernel_body(s), s[s.index("def _plan("):]  # noqa: F841
    # the kernel takes descriptors instead of pointers and builds none itself
    assert "a_desc, b_desc, c_desc,  # host tensor descriptors" in body and "a_ptr" not in body
    assert "make_tensor_descriptor" not in body and "mask=" not in body and "tl.where" not in body
    assert "a_desc.load([off_m, ki * BLOCK_K])" in body and ".to(c_desc.dtype))" in body
    specs = ("descriptors={0: ([M, K], [K, 1], [BLOCK_M, BLOCK_K]), 1: ([K, N], [N, 1], [BLOCK_K, BLOCK_N]), "
             "2: ([M, N], [N, 1], [BLOCK_M, BLOCK_N])}")
    assert specs in launcher
    assert "kernel(\n            a, b, c, M, N, K," in launcher
    assert "scratch=True" not in code(s)  # no in-kernel descriptors, no scratch memory
    assert "16-byte" in launcher  # the same alignment checks as in-kernel descriptors
    subtiled = src(memory="host_descriptor", epilogue_subtile=True, persistent=True)
    assert "2: ([M, N], [N, 1], [BLOCK_M, BLOCK_N // 2])}" in subtiled
    assert kernel_body(subtiled).count("c_desc.store(") == 2
    assert "a, b, c, M, N, K, num_sms," in launch_call(subtiled)
    split = src(memory="host_descriptor", split_k=4)
    assert "a, b, c, partials, counters, M, N, K," in launch_call(split)
    assert "for ki in range(k_lo, k_hi):" in kernel_body(split) and "c_desc.store(" in kernel_body(split)
    assert "descriptors=" not in code(src(memory="descriptor")) and "descriptors=" not in code(src())


def test_split_k_adds_one_launch_with_partials_and_an_arrival_counter():
    s = src(split_k=4)
    body = kernel_body(s)
    # pointer loads: the unmasked steps of this split's range, then the masked tail if it holds the last step
    assert "for ki in range(k_lo, tl.minimum(k_hi, k_full)):" in body and "if k_hi > k_full:" in body
    assert re.search(r"^SPLIT_K = 4\b", s, re.M) and "grid = (num_tiles * SPLIT_K,)" in s
    assert 'tl.atomic_add(counter_ptr + tile_id, 1, sem="acq_rel"' in body
    assert "if arrived == SPLIT_K - 1:" in body and 'cache_modifier=".cg"' in body
    assert "tl.atomic_xchg(counter_ptr + tile_id, 0" in body  # reset by the last program
    assert "for ki in range(k_lo, k_hi):" in kernel_body(src(split_k=4, memory="descriptor"))
    assert s.count("    kernel(\n") == 1 and "counters = torch.zeros(num_tiles, dtype=torch.int32" in s


def test_stream_k_shares_the_last_partial_wave_by_k_steps():
    s = src(persistent=True, stream_k=True)
    body = kernel_body(s)
    assert s.startswith('"""') and '@triton.jit(do_not_specialize=["sk_share", "sk_slots"])' in s
    # whole waves first, then the stream-K phase over the remaining tiles' K steps
    assert "dp_tiles = num_tiles - num_tiles % num_sms" in body
    assert "for tile_id in tl.range(tl.program_id(0), dp_tiles, num_sms, flatten=True):" in body
    assert "for sk_tile in range(run_lo // k_tiles, tl.cdiv(run_hi, k_tiles)):" in body
    assert "for ki in range(k_lo, tl.minimum(k_hi, k_full)):" in body
    # a tile covered by one program is stored directly, otherwise its last-arriving program sums the partials
    assert "if parts == 1:" in body and "if arrived == parts - 1:" in body
    assert "tl.store(slots + (tl.program_id(0) - first) * (BLOCK_M * BLOCK_N), acc)" in body
    assert "tl.atomic_xchg(counter_ptr + sk_tile, 0" in body
    assert "grid = (num_sms,)" in s and "counters = torch.zeros(max(sk_tiles, 1), dtype=torch.int32" in s
    assert "partials, counters, M, N, K, num_sms, sk_share, sk_slots," in launch_call(s)
    # without the gene, a persistent kernel has none of it
    plain = code(src(persistent=True))
    for absent in ("Stream-K", "sk_share", "dp_tiles", "atomic", "sk_tile", "SK_MAX_PARTS", "do_not_specialize"):
        assert absent not in plain, absent


def test_epilogue_subtile_stores_two_halves():
    pointer = kernel_body(src(epilogue_subtile=True))
    assert "tl.split(" in pointer and pointer.count("tl.store(") == 2
    desc = kernel_body(src(epilogue_subtile=True, memory="descriptor"))
    assert "block_shape=[BLOCK_M, BLOCK_N // 2]" in desc and desc.count("c_desc.store(") == 2
    assert "tl.split(" not in kernel_body(src(memory="descriptor"))


def test_pointer_kernels_state_row_alignment_that_triton_cannot_see():
    genome = FAMILY.make(FAMILY.base())
    s = OP.render(genome, OP.problem((1000, 3000, 2000), "bf16"), HOPPER)  # N % 16 = 8, K % 16 = 0
    assert re.search(r"^ROW_ALIGN = 8\b", s, re.M) and "    N = N // ROW_ALIGN * ROW_ALIGN" in s
    assert "K = K // ROW_ALIGN" not in s and "if N % ROW_ALIGN:" in s
    fp32 = OP.render(genome.replace(BLOCK_K=32), OP.problem((1000, 1004, 1000), "fp32"), HOPPER)
    assert re.search(r"^ROW_ALIGN = 4\b", fp32, re.M) and "if K % ROW_ALIGN or N % ROW_ALIGN:" in fp32
    for shape in ((4096, 4096, 4096), (1000, 3001, 2001)):  # Triton sees the first; nothing to state for the second
        assert "ROW_ALIGN" not in code(OP.render(genome, OP.problem(shape, "fp16"), HOPPER))
    desc = genome.replace(memory="descriptor")
    assert "ROW_ALIGN" not in code(OP.render(desc, OP.problem((1000, 3000, 2000), "bf16"), HOPPER))

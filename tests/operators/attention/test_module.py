"""What a rendered attention module is: a header (the genome's constants as CONFIG, the entry function) above
operators/attention/arguments.py and the backend's kernel file pasted verbatim; the kernel files are real modules
whose structure genes are constexpr switches, so two genomes' modules differ only in their header."""

from __future__ import annotations

import ast

import operators
from evo.problem import HOPPER
from genomes.attention_gluon import GLUON_FIXED
from operators._paste import MARKER, pasted_source
from operators.attention import gluon_kernel, kernel
from operators.attention.module import ARGUMENTS_FILE, GLUON_KERNEL_FILE, KERNEL_FILE

OP = operators.get("attention+causal")
PROBLEM = OP.problem((2, 16, 4, 300, 1000, 64), "bf16")


def _render(**values):
    return OP.render(OP.family.make(OP.family.base(**values)), PROBLEM, HOPPER)


def _config(text):
    start = text.index("\nCONFIG = ") + len("\nCONFIG = ")
    return ast.literal_eval(text[start:text.index("\n}\n", start) + 2])


def test_the_kernel_files_are_real_modules():
    """Importable, their kernels decorated (JIT functions, or the interpreter's under TRITON_INTERPRET)."""
    for module, names in ((kernel, ("attention_kernel", "attention_combine", "_key_block", "_attend_tile")),
                          (gluon_kernel, ("attention_kernel", "attend", "produce", "mma_partition"))):
        for name in names:
            assert getattr(module, name).fn.__name__ == name
        assert callable(module.attention_plan)


def test_a_module_is_its_header_and_the_pasted_files():
    pasted = pasted_source(ARGUMENTS_FILE) + "\n\n" + pasted_source(KERNEL_FILE)
    plain, packed = _render(), _render(BLOCK_M=16, pack_gqa=True, kv_split=4, reduce="last_program", kv_load="tma",
                                       persistent=1, mask_loop="masked", grid="heads_first", q_order="reverse")
    for text in (plain, packed):
        ast.parse(text)
        assert text.endswith(pasted) and text.count(MARKER) == 2
    assert plain.split("\nCONFIG = ")[1].split("\n}\n")[1] == packed.split("\nCONFIG = ")[1].split("\n}\n")[1]
    gluon = _render(**GLUON_FIXED, backend="gluon", BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=2, consumers=2)
    assert gluon.endswith(pasted_source(ARGUMENTS_FILE) + "\n\n" + pasted_source(GLUON_KERNEL_FILE))


def test_every_structure_gene_is_a_switch_of_the_config():
    base = _config(_render())
    assert base == {"CAUSAL": True, "BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 8, "NUM_STAGES": 3, "REVERSE": False,
                    "PROGRAMS": 0, "PACK_GQA": False, "SPLIT": 1, "LAST_PROGRAM": False, "MASK_ALL": False,
                    "TILES_FIRST": True, "TMA": False, "SOFTCAP": 0.0, "WINDOW": 0}
    for values, switch in (({"pack_gqa": True}, {"PACK_GQA": True}), ({"kv_split": 4}, {"SPLIT": 4}),
                           ({"kv_split": 4, "reduce": "last_program"}, {"SPLIT": 4, "LAST_PROGRAM": True}),
                           ({"mask_loop": "masked"}, {"MASK_ALL": True}), ({"q_order": "reverse"}, {"REVERSE": True}),
                           ({"grid": "heads_first"}, {"TILES_FIRST": False}), ({"kv_load": "tma"}, {"TMA": True}),
                           ({"persistent": 2}, {"PROGRAMS": 2 * HOPPER.num_sms})):
        assert _config(_render(**values)) == {**base, **switch}, values

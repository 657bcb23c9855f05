"""The pipeline's stages on the one record: render checks validity once and fills the source, a row carries the
candidate's identity and what compiling found, and a served row is a new row of the same measurement."""

from __future__ import annotations

import pickle

import pytest

from evo.evaluate import Candidate, CompileResult, make_candidate, pipeline
from evo.evaluate.modules import source_hash
from evo.problem import HOPPER
from genomes.base import InvalidGenome
from tests.fixtures.faulty_operator import FaultyOperator, genome

OP = FaultyOperator()


class Picky(FaultyOperator):
    """Rejects big blocks, so that validity has something to say."""

    def make_family(self, overrides):
        family = super().make_family(overrides)
        family.violations = lambda g, p, t: ["BLOCK above 512"] if g["BLOCK"] > 512 else []
        return family


def test_render_fills_the_record_or_ends_it_as_invalid():
    op = Picky()
    cand = Candidate(op.problem((64,), "fp32"), genome(block=256), op, "seed", ("p1",), ticket=7)
    assert pipeline.render(cand, HOPPER) is None
    assert cand.source and cand.source_hash == source_hash(cand.source) and cand.ready
    bad = Candidate(op.problem((64,), "fp32"), genome(block=1024), op, "mutate", ("p2",))
    row = pipeline.render(bad, HOPPER)
    assert row.status == "invalid" and "BLOCK above 512" in row.reason and not bad.source
    assert row.origin == "mutate" and row.parents == ["p2"] and row.genome_hash == bad.genome.hash
    with pytest.raises(InvalidGenome):
        make_candidate(op, genome(block=1024), op.problem((64,), "fp32"), HOPPER)


def test_one_row_builder_carries_identity_and_compile_facts():
    cand = make_candidate(OP, genome(), OP.problem((128,), "fp16"), HOPPER, origin="crossover", parents=["a", "b"])
    cand.compiled = CompileResult("ok", resources={"shared": 16}, compile_s=0.5)
    row = cand.row("ok", median_ms=1.0, baseline_ms=2.0)
    assert (row.problem_key, row.source_hash, row.origin, row.parents) == (cand.problem.key, cand.source_hash,
                                                                           "crossover", ["a", "b"])
    assert row.resources == {"shared": 16} and row.compile_s == 0.5 and row.ratio == 2.0
    assert row.started_at <= row.finished_at
    assert pickle.loads(pickle.dumps(cand)).operator.name == "faulty"  # the operator travels with it


def test_a_failed_compile_ends_the_candidate_and_a_served_row_is_new():
    cand = make_candidate(OP, genome(), OP.problem((128,), "fp16"), HOPPER, origin="random")
    row = pipeline.compiled(cand, CompileResult("out_of_resources", "too big", worker="pid1"))
    assert row.status == "out_of_resources" and row.worker == "pid1" and not cand.ready
    measured = cand.row("ok", median_ms=1.0, baseline_ms=1.0, gpu="G")
    measured.id = 41
    other = make_candidate(OP, genome(), OP.problem((128,), "fp16"), HOPPER, origin="transfer", parents=["x"])
    served = pipeline.look_up(other, lambda *key: measured, type("Info", (), {"gpu": "G", "versions": {}})())
    assert served.worker == "store#41" and served.id is None and served.origin == "transfer"
    assert served.median_ms == 1.0 and served.parents == ["x"]
    assert pipeline.look_up(other, None, None) is None

"""The grid archive: placing, improving with a noise margin, metrics, history, and rebuilding from a store."""

from __future__ import annotations

import numpy as np
import pytest

from evo.archive import ELITE_FIELDS, AddStatus, Axis, GridArchive, make_axes
from evo.experiment.spec import DescriptorSpec
from evo.problem import HOPPER, Problem
from evo.store.record import Evaluation
from evo.store.sqlite import Store
from genomes.base import Descriptor
from genomes.gemm import GemmFamily

PROBLEM = Problem("gemm", (("M", 512), ("N", 512), ("K", 512)), "fp16")
FAMILY = GemmFamily()


def throughput(ev: Evaluation) -> float | None:
    """Test throughput: 1 / ms (higher is better) for ok rows."""
    return 1.0 / ev.median_ms if ev.status == "ok" and ev.median_ms else None


TILE_AND_WARPS = (DescriptorSpec("tile_area"), DescriptorSpec("num_warps"))


def make_archive(specs=TILE_AND_WARPS, margin=0.01) -> GridArchive:
    return GridArchive(make_axes(FAMILY, specs), throughput, margin)


def ev(genome, ms=1.0, status="ok", resources=None, id=None) -> Evaluation:
    return Evaluation(operator="gemm", problem_key=PROBLEM.key, problem=PROBLEM.to_json(), genome=genome.canonical(),
                      genome_hash=genome.hash, source_hash="s" + genome.hash, status=status,
                      median_ms=ms if status == "ok" else None, baseline_ms=1.0 if status == "ok" else None,
                      resources=resources or {}, id=id)


def base(**kw):
    return FAMILY.make(FAMILY.base(**kw))


def test_new_improved_and_not_added():
    a = make_archive()
    g = base()
    first = a.add([ev(g, 2.0)])[0]
    assert first.status == AddStatus.NEW
    slower = a.add([ev(base(GROUP_M=4), 2.5)])[0]  # same cell (GROUP_M is not a descriptor), slower
    assert slower.status == AddStatus.NOT_ADDED and slower.cell == first.cell
    faster = a.add([ev(base(GROUP_M=1), 1.0)])[0]
    assert faster.status == AddStatus.IMPROVED
    assert a.get(faster.cell).genome_hash == base(GROUP_M=1).hash
    other = a.add([ev(base(num_warps=8), 3.0)])[0]
    assert other.status == AddStatus.NEW and other.cell != faster.cell
    assert len(a) == 2 and a.evaluations == 4


def test_failed_evaluations_count_but_are_not_added():
    a = make_archive()
    results = a.add([ev(base(), status="wrong"), ev(base(), status="compile_error")])
    assert [r.status for r in results] == [AddStatus.NOT_ADDED] * 2
    assert len(a) == 0 and a.evaluations == 2 and a.best is None
    assert a.status_counts == {"wrong": 1, "compile_error": 1}


def test_noise_margin_keeps_the_elite_against_a_retimed_twin():
    a = make_archive(margin=0.05)
    g = base()
    a.add([ev(g, 1.0)])
    first = a.best
    twin = a.add([ev(base(GROUP_M=4), 1.0 / 1.04)])[0]  # 4% faster: within the 5% margin
    assert twin.status == AddStatus.NOT_ADDED and a.best == first
    assert a.best_index == 1
    clear = a.add([ev(base(GROUP_M=1), 1.0 / 1.06)])[0]  # 6% faster: beyond it
    assert clear.status == AddStatus.IMPROVED and a.best_index == 3


def test_metrics_and_history():
    a = make_archive()
    values = [(base(), 2.0), (base(num_warps=8), 4.0), (base(BLOCK_M=64), 1.0), (base(), 9.0)]
    a.add([ev(g, ms) for g, ms in values])
    m = a.metrics()
    assert m.cells == 9 * 3 and m.filled == 3
    assert m.coverage == pytest.approx(3 / 27)
    assert m.qd_score == pytest.approx(1 / 2.0 + 1 / 4.0 + 1 / 1.0)
    assert m.norm_qd_score == pytest.approx(m.qd_score / 27)
    assert m.best == pytest.approx(1.0) and m.best_elite.genome_hash == base(BLOCK_M=64).hash
    h = a.history
    assert h.evaluations == [1, 2, 3, 4]
    assert h.best == pytest.approx([0.5, 0.5, 1.0, 1.0])
    assert h.qd_score[-1] == pytest.approx(m.qd_score)
    assert h.first_reaching(1.0) == 3 and h.first_reaching(2.0) is None
    assert set(a.data()[0]) == set(ELITE_FIELDS)


def test_custom_edges_and_out_of_range_values():
    a = make_archive(specs=(DescriptorSpec("tile_area", (10.0, 12.0, 14.0)),))
    assert a.shape == (3,)
    assert a.add([ev(base(BLOCK_M=16, BLOCK_N=16), 1.0)])[0].cell == (0,)  # log2 = 8, below the first edge
    assert a.add([ev(base(BLOCK_M=64, BLOCK_N=128), 1.0)])[0].cell == (1,)  # 13
    assert a.add([ev(base(BLOCK_M=256, BLOCK_N=256), 1.0)])[0].cell == (2,)  # 16, above the last edge


def test_descriptor_needing_resources():
    a = make_archive(specs=(DescriptorSpec("smem_kib"), DescriptorSpec("num_warps")))
    missing = a.add([ev(base(), 1.0)])[0]
    assert missing.status == AddStatus.NOT_ADDED and "resources" in missing.reason
    placed = a.add([ev(base(), 1.0, resources={"shared": 70 * 1024})])[0]
    assert placed.status == AddStatus.NEW and placed.cell == (2, 1)


def test_bad_descriptors_raise():
    with pytest.raises(ValueError, match="unknown descriptor"):
        make_axes(FAMILY, (DescriptorSpec("nope"),))
    with pytest.raises(ValueError, match="increase"):
        Axis("x", Descriptor("x", lambda g, r: 0.0, (0.0,)), (1.0, 1.0))
    with pytest.raises(ValueError, match="noise_margin"):
        make_archive(margin=-0.1)


def test_default_descriptors_need_no_resources():
    axes = make_axes(FAMILY, ())
    assert len(axes) == 2 and not any(a.descriptor.needs_resources for a in axes)


def test_rebuild_from_store_is_identical(tmp_path):
    class Op:
        family = FAMILY

        @staticmethod
        def throughput(problem, ms):
            return 1.0 / ms

    rng = np.random.default_rng(3)
    specs = (DescriptorSpec("tile_area"), DescriptorSpec("block_k"))
    live = GridArchive.for_problem(Op(), PROBLEM, specs, 0.02)
    with Store(tmp_path / "s.sqlite") as store:
        for i in range(150):
            g = FAMILY.random(rng, PROBLEM, HOPPER)
            status = "ok" if i % 5 else ("wrong", "compile_error", "timeout")[i % 3]
            e = ev(g, float(rng.uniform(0.5, 3.0)), status)
            store.add(e)  # the search's order: store, then archive
            live.add([e])
        # a row of another problem must not leak in
        store.add(Evaluation(**{**ev(base(), 0.01).to_row(), "problem_key": "gemm:1x1x1:fp16",
                                "versions": {}, "times_ms": [], "resources": {}, "parents": []}))
        rebuilt = GridArchive.from_store(store, PROBLEM, Op(), specs, 0.02)
    assert len(live) > 5
    assert rebuilt.elites() == live.elites()
    assert rebuilt.history.as_dict() == live.history.as_dict()
    assert (rebuilt.best, rebuilt.best_index, rebuilt.status_counts) == (live.best, live.best_index,
                                                                         live.status_counts)
    assert rebuilt.qd_score == live.qd_score


def test_a_genome_stored_before_a_gene_existed_is_placed_with_its_implied_value():
    """A Triton genome encoded without `backend` (as every genome stored before the Gluon genes is) lands in its
    structure cell through the family's `complete`, which an archive made for a problem holds; without it, the
    structure descriptor cannot read it."""
    import operators

    specs = (DescriptorSpec("structure"),)
    genome = base(persistent=True, memory="host_descriptor")
    assert "backend" not in genome.canonical()  # implied: left out of the encoding
    [result] = GridArchive(make_axes(FAMILY, specs), throughput, complete=FAMILY.complete).add([ev(genome, 0.5)])
    assert result.status is AddStatus.NEW
    [result] = GridArchive(make_axes(FAMILY, specs), throughput).add([ev(genome, 0.5)])
    assert result.status is AddStatus.NOT_ADDED and "cannot place" in result.reason
    live = GridArchive.for_problem(operators.get("gemm"), PROBLEM, specs)
    assert live.add([ev(genome, 0.5)])[0].status is AddStatus.NEW

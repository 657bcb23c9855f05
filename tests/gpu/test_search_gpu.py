"""The search's real path on a GPU: an embedded Ray instance, CPU compile tasks, one actor per GPU wrapping
evo's GpuWorker, a kill -9 of the driver, and resume. Small on purpose (a minute or two on one H100).

    python -m pytest tests/gpu/test_search_gpu.py -q -s
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
GENOME = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [32, 64], "num_warps": [4, 8], "num_stages": [3, 4],
          "split_k": [1], "persistent": [False, True], "memory": ["pointer", "descriptor"],
          "warp_specialize": [False], "epilogue_subtile": [False]}
YAML = """name: gpu-search
operator: gemm
problems:
  shapes: [1024x1024x1024, 512x2048x1024]
  dtypes: [bf16]
genome: {genome}
budget:
  evaluations: 16
initial_random: 4
executor:
  kind: ray
  gpus: 1
"""


def experiment(tmp_path: Path):
    import json

    from evo.experiment.config import load_experiment

    path = tmp_path / "gpu-search.yaml"
    path.write_text(YAML.format(genome=json.dumps(GENOME)))
    return path, load_experiment(path)


def test_search_on_the_gpu_with_kill_and_resume(tmp_path):
    from evo.experiment.rundir import RunDir
    from evo.search.run import run_experiment
    from evo.store.sqlite import Store

    path, exp = experiment(tmp_path)
    rd = RunDir.of(tmp_path / "runs", exp.name)
    driver = [sys.executable, "-c", "import sys; from evo.experiment.config import load_experiment; "
              "from evo.search.run import run_experiment; "
              f"run_experiment(load_experiment({str(path)!r}), {str(rd.path)!r})"]
    proc = subprocess.Popen(driver, cwd=REPO, env=dict(os.environ), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if rd.store.exists():
                with Store(rd.store) as store:
                    if store.count() >= 6:
                        break
            if proc.poll() is not None:
                pytest.fail(f"driver exited early: {proc.stderr.read().decode()[-3000:]}")
            time.sleep(0.5)
        else:
            pytest.fail("the driver stored fewer than 6 evaluations in 5 minutes")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with Store(rd.store) as store:
        before = [e.to_row() for e in store.evaluations()]
    events = []
    summary = run_experiment(exp, rd.path, resume=True, on_event=events.append)
    assert [p.evaluations for p in summary.problems] == [16, 16]
    with Store(rd.store) as store:
        rows = store.evaluations()
    assert [e.to_row() for e in rows[:len(before)]] == before
    ok = [r for r in rows if r.status == "ok"]
    print(f"\n{len(rows)} rows, {len(ok)} ok on {ok[0].gpu if ok else '?'}; statuses "
          f"{sorted({r.status for r in rows})}")
    for p in summary.problems:
        print(f"{p.problem_key}: best {p.best:.1f} {p.unit} = {p.best_ratio:.3f}x cuBLAS "
              f"(found after {p.best_index} evaluations; transferred {p.transferred}, saved {p.transfer_saved})")
    hits = [r.resources.get("cache_hit") for r in ok]
    print(f"compile-ahead cache hits on the GPU: {sum(h is True for h in hits)}/{len(hits)}")
    assert len(ok) >= 16 and all(r.ratio and r.ratio > 0 for r in ok)
    assert all(r.gpu == ok[0].gpu and "cpu" not in r.gpu for r in ok)
    assert max(e.busy_workers for e in events) == 1 and all(e.total_workers == 1 for e in events)
    assert all(p.best_ratio is not None for p in summary.problems)
    # what could really go wrong: timings that are not timings, a baseline not timed beside its kernel, a
    # check that passes nothing, compile-ahead that the GPU ignores
    assert all(0.05 < r.ratio < 3.0 for r in ok), sorted(r.ratio for r in ok)
    assert all(r.max_rel_error is not None and r.max_rel_error < 0.05 for r in ok)
    assert {r.baseline for r in ok} == {"cublas"}
    assert all(len(r.times_ms) >= 5 for r in ok), sorted((len(r.times_ms), r.worker) for r in ok)
    assert all(r.spread_ms < r.median_ms for r in ok), [(r.spread_ms, r.median_ms, r.worker) for r in ok
                                                         if not r.spread_ms < r.median_ms]
    assert all(h is True for h in hits), hits
    assert all(p.best_ratio >= 0.5 for p in summary.problems), [p.best_ratio for p in summary.problems]
    # the elite that status, report and export name is the archive's best, and its row is an ok row
    from evo.archive.elite import best_kernels

    with Store(rd.store) as store:
        named = {e.problem.key: e.evaluation for e in best_kernels(store)}
    for p in summary.problems:
        assert named[p.problem_key].status == "ok"
        assert named[p.problem_key].ratio == pytest.approx(p.best_ratio)

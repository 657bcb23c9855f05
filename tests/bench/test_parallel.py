"""evo bench over several GPUs, without a GPU: slot discovery, the children's command lines, and the
scheduler with stand-in children that write SYNTHETIC TEST DOCUMENTS (they measure nothing)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from evo.bench.parallel import child_command, gpu_slots
from evo.bench.results import load_report
from tests.bench.test_bench import _experiment, synthetic_doc


def test_gpu_slots_follow_cuda_visible_devices():
    assert gpu_slots(env={"CUDA_VISIBLE_DEVICES": "2,5,7"}) == ["2", "5", "7"]
    assert gpu_slots(2, env={"CUDA_VISIBLE_DEVICES": "2,5,7"}) == ["2", "5"]
    assert gpu_slots(env={"CUDA_VISIBLE_DEVICES": ""}) == []
    with pytest.raises(ValueError):
        gpu_slots(0, env={"CUDA_VISIBLE_DEVICES": "0"})


def test_child_command_forwards_settings(tmp_path):
    args = SimpleNamespace(experiment="x.yaml", reps=50, finalists=2, seed=7, contenders="cublas,evo", wall_s=90.0,
                           evaluations=None)
    p = _experiment().problems[1]
    cmd = child_command(args, p, tmp_path / "p.json", tmp_path / "run", None)
    assert cmd[1:4] == ["-m", "evo.bench.command", "x.yaml"]
    joined = " ".join(cmd)
    assert f"--problems {p.key}" in joined and "--run" in joined and "--contenders cublas,evo" in joined
    assert "--search-per-gpu" not in joined and "--wall-s 90.0" in joined and "--evaluations" not in joined
    cmd = child_command(args, p, tmp_path / "p.json", None, tmp_path / "search")
    assert "--search-per-gpu" in cmd and "--run" not in cmd


_FAKE_CHILD = r'''
import json, sys, time
partial, key, doc = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if "64x64x64" in key:
    time.sleep(60)  # overruns the parent's limit
if "32x32x32:fp32" in key:
    print("child failing on purpose"); sys.exit(3)
m, n, k = (int(x) for x in key.split(":")[1].split("x"))
doc["problems"] = [dict(doc["problems"][0], key=key, M=m, N=n, K=k)]
open(partial, "w").write(json.dumps(doc))
'''


@pytest.mark.slow
def test_run_parallel_schedules_children_merges_and_records_failures(tmp_path, monkeypatch, capsys):
    """The scheduler with stand-in children (they write synthetic test documents, measure nothing)."""
    import evo.bench.parallel as bp

    doc = synthetic_doc()

    def fake_child(args, problem, partial, run, search_dir):
        return [sys.executable, "-c", _FAKE_CHILD, str(partial), problem.key, json.dumps(doc)]

    monkeypatch.setattr(bp, "child_command", fake_child)
    exp = _experiment()
    args = SimpleNamespace(experiment="x.yaml", run=str(tmp_path / "run"), search_per_gpu=False, timeout_s=3.0,
                           out=str(tmp_path / "out"), reps=5, finalists=1, seed=0, contenders=None)
    rc = bp.run_parallel(args, exp, list(exp.problems), tmp_path / "run", ["0", "1"], search=None)
    assert rc == 1  # two of four problems could not be measured
    merged = load_report(tmp_path / "out" / "gemm-test-gpu-synthetic-data.json")
    assert [p["key"] for p in merged["problems"]] == ["gemm:16x16x16:fp16", "gemm:32x32x32:fp16"]
    reasons = {f["key"]: f["reason"] for f in merged["failures"]}
    assert reasons["gemm:32x32x32:fp32"] == "child exited 3"
    assert reasons["gemm:64x64x64:fp16"].startswith("timed out")
    out = capsys.readouterr().out
    assert "child failing on purpose" in out and "GPU 0:" in out and "GPU 1:" in out

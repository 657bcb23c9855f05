"""A whole scaling session without a GPU: a stand-in workload whose child process writes a store of TEST DATA the
way a search would (rows, clocks, CPU, queue, summaries), run per GPU count, kept without kernel texts, and the
document computed from the kept folder alone; the deadline skips runs and stops one still going."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.scaling import cli
from benchmarks.scaling.analyse import analyse
from benchmarks.scaling.report import table_lines
from benchmarks.scaling.runner import run_once
from benchmarks.scaling.session import run_session
from benchmarks.scaling.stores import SESSION
from benchmarks.scaling.workloads import Workload

# The stand-in search on n "GPUs": 8 x n rows in 8 s of clock, the best row reached sooner with more GPUs.
CHILD = """
import os, sys, time
from pathlib import Path
from tests.benchmarks.scaling.synthetic import gemm, queue, row, write_store
folder, n = Path(sys.argv[1]), int(sys.argv[2])
(folder / "env.txt").write_text(os.environ["CUDA_VISIBLE_DEVICES"] + " " + os.environ["EVO_RESULTS_DB"])
if n == 99:
    time.sleep(60)
a, b = gemm("64x64x64"), gemm("128x128x128")
rows = [row(a, 1000.0 + i / n, 4.0 / (i + 1), worker=f"w{i % n}", took=0.9 / n) for i in range(8 * n)]
rows += [row(b, 2000.0 + i, None, "wrong", worker="w0") for i in range(3)]
meta = {"problems": [a.key, b.key], f"wall_s:{a.key}": 8.0, f"wall_s:{b.key}": 4.0, f"cpu_s:{a.key}": 1.0,
        f"cpu_s:{b.key}": 0.5, f"queue:{a.key}": queue(0.5 * n, n, 8.0), f"summary:{a.key}": {"reason": "wall_s"}}
write_store(folder / "run" / "store.sqlite", rows, meta)
time.sleep(0.3)
"""


@dataclass(frozen=True)
class StandIn(Workload):
    def command(self, gpus: int, folder: Path) -> list[str]:
        folder.mkdir(parents=True, exist_ok=True)
        return [sys.executable, "-c", CHILD, str(folder), str(gpus)]


def _stand_in() -> StandIn:
    return StandIn("standin", "a stand-in search writing TEST DATA", ("gemm:64x64x64:fp16", "gemm:128x128x128:fp16"),
                   {"experiment": "none"})


HEADER = {"gpu": "TEST DATA (no GPU)", "gpus_on_machine": 4, "cpus": 2, "versions": {}, "date": "2026-11-27",
          "code": "test"}


def test_a_session_keeps_each_run_and_its_document_comes_from_the_kept_folder(tmp_path, capsys):
    keep = tmp_path / "kept"
    root = run_session([_stand_in()], [1, 2, 4], tmp_path / "work", keep, tmp_path / "caches", HEADER,
                       say=lambda *_: None)
    assert root == keep and json.loads((keep / SESSION).read_text())["counts"] == [1, 2, 4]
    kept = keep / "standin" / "2gpu"
    assert (kept / "measure.json").is_file() and (kept / "run" / "store.sqlite").is_file()
    assert not (kept / "results.sqlite").exists()  # the run's results database stays behind
    env = (tmp_path / "work" / "standin" / "2gpu" / "env.txt").read_text()
    assert env.startswith("0,1 ") and env.endswith(str(tmp_path / "work" / "standin" / "2gpu" / "results.sqlite"))

    doc = analyse(keep)
    w = doc["workloads"]["standin"]
    assert doc["counts"] == [1, 2, 4] and w["reference_gpus"] == 1 and w["skipped"] == {}
    assert [w["runs"][n]["evaluations"] for n in ("1", "2", "4")] == [11, 19, 35]
    assert w["runs"]["1"]["per_minute"] == 55.0  # 11 rows in 12 s of clock
    assert w["speedup"] == {"1": 1.0, "2": round(19 / 11, 3), "4": round(35 / 11, 3)}
    assert w["runs"]["4"]["workers"] == ["w0", "w1", "w2", "w3"] and w["runs"]["4"]["driver_cpu_share"] == 0.125
    assert w["runs"]["2"]["problems_ended"] == 1 and w["runs"]["2"]["not_ended"] == ["gemm:128x128x128:fp16"]
    a = w["time_to_quality"]["problems"]["gemm:64x64x64:fp16"]
    assert a["reference_best_ms"] == 0.5 and a["runs"]["1"]["seconds"] == 7.0
    assert a["runs"]["4"]["seconds"] == 1.75 and a["runs"]["4"]["of_reference_time"] == 0.25  # row 8 of 4 "GPUs"
    goals = w["goals"]
    assert goals["speedup_2gpus"]["met"] is False and goals["time_to_quality_4gpus"]["met"] is True
    assert goals["time_to_quality_4gpus"]["no_target"] == ["gemm:128x128x128:fp16"]
    lines = table_lines(doc)
    assert any(line.split()[:2] == ["4", str(w["runs"]["4"]["per_minute"])] for line in lines)

    out = tmp_path / "reports"
    assert cli.main(["--analyse", str(keep), "--out", str(out), "--tag", "t"]) == 0
    written = json.loads((out / "scaling-test-data-no-gpu-t.json").read_text())
    assert written["workloads"]["standin"]["speedup"] == w["speedup"]
    assert "goal speedup_4gpus: missed" in capsys.readouterr().out


def test_the_deadline_skips_runs_that_cannot_start_and_says_so(tmp_path):
    said: list[str] = []
    root = run_session([_stand_in()], [1, 2], tmp_path / "work", None, tmp_path / "caches", HEADER,
                       deadline_s=1.0, min_run_s=0.0, say=said.append)
    session = json.loads((root / SESSION).read_text())
    assert set(session["workloads"]["standin"]["skipped"]) == {"1", "2"} and len(said) == 2
    doc = analyse(root)
    assert doc["workloads"]["standin"]["runs"] == {} and "deadline" in doc["workloads"]["standin"]["skipped"]["1"]
    assert any("skipped: deadline" in line for line in table_lines(doc))


def test_a_run_past_its_limit_is_stopped_as_a_user_stops_one(tmp_path):
    m = run_once(_stand_in(), 99, tmp_path / "run", tmp_path / "caches", limit_s=3.0)
    assert m["interrupted"] is True and m["exit_status"] != 0
    assert json.loads((tmp_path / "run" / "measure.json").read_text())["interrupted"] is True

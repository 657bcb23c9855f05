"""How far Helion's autotuner got, read from its CSV log (evo.bench.helion_progress), and bench-search's use of it:
a run stopped during Helion's full tuning still reports its progress."""

from __future__ import annotations

import os
import threading
import time

from evo.bench import helion_progress as hp

HEADER = "timestamp_s,config_index,generation,status,perf_ms,compile_time_s,config\n"


def _write(path, rows):
    path.write_text(HEADER + "".join(f'{t},{i},{g},{s},{ms},0.3,"Config(block_sizes=[{i}])"\n'
                                     for t, i, g, s, ms in rows))


def test_summary_of_a_log(tmp_path):
    log = tmp_path / "h.csv"
    assert hp.autotune_progress(log) is None  # not written yet
    _write(log, [(1.0, 1, 0, "started", "")])
    assert hp.autotune_progress(log) is None  # nothing finished
    _write(log, [(1.0, 1, 0, "started", ""), (2.5, 1, 0, "ok", 2.0), (3.0, 2, 0, "error", ""),
                 (9.0, 3, 2, "ok", 0.5), (12.0, 4, 3, "ok", 0.5), (14.0, 5, 3, "started", "")])
    s = hp.autotune_progress(log)
    assert (s["configs"], s["ok"], s["failed"], s["generations"]) == (4, 3, 1, 4)
    assert (s["elapsed_s"], s["best_ms"], s["best_at_s"]) == (12.0, 0.5, 9.0)  # first reached, not last tied
    assert s["best_config"] == "Config(block_sizes=[3])"


def test_a_problems_alternatives_log_helion_beside_their_caches_and_restore_the_variable(tmp_path, monkeypatch):
    from evo.bench.search_bench import HELION_LOG, fresh_caches

    monkeypatch.setenv(hp.LOG_VARIABLE, "/theirs")
    with fresh_caches(tmp_path / "a") as root:
        assert os.environ[hp.LOG_VARIABLE] == str(tmp_path / "a" / HELION_LOG) and root.is_dir()
    assert os.environ[hp.LOG_VARIABLE] == "/theirs"


def test_watch_reports_new_rows_while_running_and_at_the_end(tmp_path):
    log, seen = tmp_path / "h.csv", []
    with hp.watch(log, seen.append, every_s=0.02):
        _write(log, [(1.0, 1, 0, "ok", 2.0)])
        deadline = time.time() + 5
        while not seen and time.time() < deadline:
            time.sleep(0.01)
        _write(log, [(1.0, 1, 0, "ok", 2.0), (4.0, 2, 1, "ok", 1.0)])
    assert seen[0]["best_ms"] == 2.0 and seen[-1]["best_ms"] == 1.0  # the last rows are read at the end
    assert len({s["configs"] for s in seen}) == len(seen)  # only changes are reported
    assert not [t for t in threading.enumerate() if t.name == "helion-progress"]


def test_a_failing_callback_never_breaks_the_block(tmp_path):
    log = tmp_path / "h.csv"
    _write(log, [(1.0, 1, 0, "ok", 2.0)])

    def boom(summary):
        raise RuntimeError("disk full")

    with hp.watch(log, boom, every_s=0.01):
        time.sleep(0.05)


def test_bench_search_reports_helion_progress_while_it_tunes(tmp_path, monkeypatch):
    """The side-by-side timing (Helion tuning inside it) writes Helion's log where bench-search told it to; the
    report written at the end of it carries the summary and the throughput of Helion's best by its own timer."""
    from evo.bench import search_bench
    from evo.bench.search_bench import bench_search
    from evo.bench.search_results import search_markdown
    from evo.evaluate.executor import LocalExecutor
    from tests.bench.test_search_bench import _fake_gpu
    from tests.fixtures import search_fixtures as fx

    fx.register(monkeypatch)
    monkeypatch.delenv(hp.LOG_VARIABLE, raising=False)
    _fake_gpu(monkeypatch, [])
    timed = search_bench._alternatives

    def tuning(*args, **kwargs):
        _write(tmp_path / "rows.csv", [(3.0, 1, 0, "ok", 2.0), (7.0, 2, 1, "ok", 1.0)])
        os.replace(tmp_path / "rows.csv", os.environ[hp.LOG_VARIABLE] + ".csv")
        return timed(*args, **kwargs)

    monkeypatch.setattr(search_bench, "_alternatives", tuning)
    pages = []
    exp = fx.experiment(name="hp", sizes=(512, 256), evaluations=4)
    with LocalExecutor(fx.StandInBackend()) as ex:
        doc = bench_search(exp, list(exp.problems)[:1], ["evo"], work_dir=tmp_path / "w", executor=ex,
                           checkpoint=lambda d: pages.append(search_markdown(d)))
    progress = doc["problems"][0]["helion_progress"]
    assert progress["configs"] == 2 and progress["best_ms"] == 1.0 and progress["best_throughput"] > 0
    assert any("Helion's tuning log: 2 configurations finished (0 failed" in p and "first reached at 7 s" in p
               for p in pages)
    assert hp.LOG_VARIABLE not in os.environ

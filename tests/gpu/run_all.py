"""Run the GPU tests one file at a time within a wall-clock budget, keeping each file's log as it finishes (a GPU
script for the device tool, whose calls are cut at a few minutes).

    python -m tests.gpu.run_all [--budget-s 540] [--out $EVO_OUT/gpu-tests] [FILE ...]

Each test file runs in its own `pytest` process with a limit of what is left of the budget; its log goes to
OUT/<file>.log and its line to OUT/summary.json at once, so a call cut short still says what ran, what passed and
where the time went. Files that no longer fit are listed as not run, never silently dropped. The table printed
last names every file with its outcome and seconds. Exit status 0 only when every file ran and passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["outcome", "main"]

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
_MIN_FILE_S = 30.0  # a file is not started with less time than this left


def outcome(returncode: int | None, log: str) -> str:
    """'passed', 'failed', 'skipped', 'timeout' or 'error' from a pytest process's status and output."""
    if returncode is None:
        return "timeout"
    if returncode == 0:
        return "skipped" if re.search(r"\b\d+ skipped\b", log) and not re.search(r"\b\d+ passed\b", log) \
            else "passed"
    if returncode == 1:
        return "failed"
    return "error"


def _summary_line(log: str) -> str:
    lines = [line.strip("= ") for line in log.splitlines() if re.search(r"\b(passed|failed|error|skipped)\b", line)]
    return lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.gpu.run_all", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="test files (default: every tests/gpu/test_*.py)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="wall seconds for all files (default 540)")
    ap.add_argument("--out", default=None, help="folder of the logs (default $EVO_OUT/gpu-tests, else /tmp)")
    args = ap.parse_args(argv)
    if args.budget_s <= 0:
        print(f"run_all: --budget-s {args.budget_s:g}: expected a positive number of seconds", file=sys.stderr)
        return 2
    files = [Path(f) for f in args.files] or sorted(HERE.glob("test_*.py"))
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        print(f"run_all: no such test file: {missing[0]}", file=sys.stderr)
        return 2
    out = Path(args.out or Path(os.environ.get("EVO_OUT") or "/tmp") / "gpu-tests")
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget_s
    rows: list[dict[str, Any]] = []
    for f in files:
        left = deadline - time.monotonic()
        row: dict[str, Any] = {"file": f.name}
        if left < _MIN_FILE_S:
            row.update(outcome="not run", seconds=0.0, summary=f"out of time ({left:.0f} s left)")
        else:
            t0 = time.monotonic()
            # tee-sys: what a test prints reaches the log as it goes, so a file cut by the budget still shows how far
            # it got (a GEMM sample cut at 300 s once left only pytest's header)
            cmd = [sys.executable, "-m", "pytest", "-v", "-rA", "-p", "no:cacheprovider", "--durations=0",
                   "--capture=tee-sys", str(f)]
            try:
                done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=left)
                code, log = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired as e:
                code = None
                log = "".join(x.decode() if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
            (out / f"{f.stem}.log").write_text(log)
            row.update(outcome=outcome(code, log), seconds=round(time.monotonic() - t0, 1), summary=_summary_line(log))
        rows.append(row)
        (out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
        print(f"[gpu-tests] {row['file']}: {row['outcome']} in {row['seconds']} s {row['summary']}", flush=True)
    width = max(len(r["file"]) for r in rows)
    print("\n".join(f"{r['file']:<{width}}  {r['outcome']:<8} {r['seconds']:>7.1f} s  {r['summary']}" for r in rows))
    return 0 if all(r["outcome"] in ("passed", "skipped") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

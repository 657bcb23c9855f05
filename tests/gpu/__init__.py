"""GPU tests and scripts. What they measure goes to $EVO_OUT (or /tmp), where the device tool collects it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def write_json(name: str, data: Any) -> Path:
    """Write `data` as $EVO_OUT/`name` (or /tmp/`name`); returns the path."""
    out_dir = Path(os.environ.get("EVO_OUT") or "/tmp")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_text(json.dumps(data, indent=1))
    return path


def search_check(launcher: Any, inputs: tuple[Any, ...], ref: Any, tolerance: float,
                 device: str = "cuda") -> tuple[str, float, str, Any]:
    """The search's own check (evo.evaluate.check.check_launcher) for scripts that run kernels in their own
    process: (correct | wrong | crashed | compile_failed, relative error, reason, the checked output buffer)."""
    from evo.evaluate.check import check_launcher
    from evo.evaluate.faults import classify

    try:
        checked = check_launcher(launcher, tuple(inputs), ref, tolerance, device)
    except Exception as exc:  # noqa: BLE001 - every failure is a row of the report
        fault = classify(exc, phase="run")
        return ("crashed" if fault.fatal else "compile_failed"), float("nan"), fault.reason[:300], None
    err = checked.max_rel_error if checked.max_rel_error is not None else float("inf")
    return ("correct" if checked.status == "ok" else "wrong"), err, checked.reason, checked.out


def run_child(script: str | Path, args: list[str], timeout_s: float) -> list[dict[str, Any]]:
    """Run a GPU test file as a child process (`python SCRIPT ARGS`, from the checkout's root) under a timeout, so a
    kernel that hangs fails the test instead of stalling it; returns the JSON rows it printed (lines starting
    with "{") and fails the calling test, with the child's stderr, when it exits otherwise than 0."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout_s,
                          cwd=root)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, f"child failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return rows

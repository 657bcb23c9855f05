"""A search driver run as a subprocess by the kill-and-resume test: `python -m tests.evo.search_driver DIR LOG`.

After each stored evaluation it appends the archive's state as one JSON line to LOG, so the test can check
that the archive rebuilt from the store after a SIGKILL is the one this process had built live.
"""

from __future__ import annotations

import json
import os
import sys


def main(run_dir: str, log_path: str) -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from evo.executor import LocalExecutor
    from evo.search import run_experiment
    from tests.evo import search_fixtures as fx

    fx.register_now()
    log = open(log_path, "a", buffering=1)

    def on_event(e):
        if e.kind == "evaluation":
            log.write(json.dumps({"problem": e.problem_key, "n": e.evaluations, "best": e.best,
                                  "qd_score": e.qd_score, "coverage": e.coverage}) + "\n")

    run_experiment(fx.experiment(name="kill", evaluations=10), run_dir, resume=os.path.exists(
        os.path.join(run_dir, "store.sqlite")), on_event=on_event,
        executor=LocalExecutor(fx.StandInBackend(delay_s=0.15)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

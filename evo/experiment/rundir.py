"""Where a run keeps its files: <output>/<experiment name>/ holding the store, a copy of the experiment and, for a
run on Ray, what Ray printed (ray.log).

The store is the run's checkpoint: resuming a run needs nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunDir", "STORE_NAME", "EXPERIMENT_NAME", "RAY_LOG_NAME"]

STORE_NAME = "store.sqlite"
EXPERIMENT_NAME = "experiment.yaml"
RAY_LOG_NAME = "ray.log"


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def of(cls, output: str | Path, name: str) -> RunDir:
        """The run directory of experiment `name` under the output folder `output`."""
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"experiment name {name!r} cannot name a run directory")
        return cls(Path(output) / name)

    @property
    def store(self) -> Path:
        return self.path / STORE_NAME

    @property
    def experiment(self) -> Path:
        return self.path / EXPERIMENT_NAME

    @property
    def ray_log(self) -> Path:
        return self.path / RAY_LOG_NAME

    def exists(self) -> bool:
        """True when a run has stored something here (a directory alone is not a run)."""
        return self.store.exists()

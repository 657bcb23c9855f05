"""GPU tests and scripts. What they measure goes to $EVO_OUT (or /tmp), where the device tool collects it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(name: str, data: Any) -> Path:
    """Write `data` as $EVO_OUT/`name` (or /tmp/`name`); returns the path."""
    out_dir = Path(os.environ.get("EVO_OUT") or "/tmp")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_text(json.dumps(data, indent=1))
    return path

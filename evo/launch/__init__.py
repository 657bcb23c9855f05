"""The one launcher: how every rendered kernel is launched, in evaluation, `evo bench`, exported files and the
Python API alike (what the search timed is what the user runs).

`runtime.py` imports only torch and triton, so rendered modules carry it verbatim (`runtime_source()`) and stay
standalone; importing it from here serves tests and tools.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["runtime_source"]


@cache
def runtime_source() -> str:
    """The runtime's source, to be pasted into a rendered module after its `import torch` and `import triton`
    (its own two import lines are left out)."""
    text = Path(__file__).with_name("runtime.py").read_text()
    return "\n".join(line for line in text.splitlines() if line not in ("import torch", "import triton")) + "\n"

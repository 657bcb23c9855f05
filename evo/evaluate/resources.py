"""What a compiled kernel uses: shared memory, registers, spills, read without a GPU.

Shared memory comes from Triton's metadata. Registers come from `cuobjdump --dump-resource-usage` on the
cubin (Triton's wheel bundles cuobjdump), and so does the stack frame, where spilled registers live: it
is what "spills" means here (bytes per thread). The ptxas count of spill stores is added when the kernel
was compiled in this process (TRITON_DUMP_PTXAS_LOG).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["cuobjdump_path", "cubin_usage", "ptxas_spills", "kernel_resources"]


@lru_cache(maxsize=1)
def cuobjdump_path() -> str | None:
    try:
        from triton import knobs

        path = knobs.nvidia.cuobjdump.path  # honours TRITON_CUOBJDUMP_PATH
        if path and Path(path).exists():
            return str(path)
    except Exception:  # older or newer knobs layouts: fall through to the bundled binary
        pass
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if bundled.exists():
            return str(bundled)
    except Exception:
        pass
    return shutil.which("cuobjdump")


def cubin_usage(cubin: bytes, name: str | None = None) -> dict[str, int]:
    """{'registers', 'stack', 'shared', 'local'} of the kernel in `cubin` (the first function when the
    name is not found); empty when cuobjdump is missing or fails."""
    tool = cuobjdump_path()
    if tool is None or not cubin:
        return {}
    fd, path = tempfile.mkstemp(suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        out = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    finally:
        os.unlink(path)
    usage: dict[str, dict[str, int]] = {}
    current = None
    for line in out.stdout.splitlines():
        m = re.match(r"\s*Function\s+([^:\s]+)\s*:", line)
        if m:
            current = m.group(1)
            continue
        if current and "REG:" in line:
            fields = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line))
            usage[current] = {"registers": int(fields.get("REG", 0)), "stack": int(fields.get("STACK", 0)),
                              "shared": int(fields.get("SHARED", 0)), "local": int(fields.get("LOCAL", 0))}
    if not usage:
        return {}
    return usage.get(name or "", next(iter(usage.values())))


def ptxas_spills(log: str, name: str) -> int | None:
    """Bytes of spill stores ptxas reported for function `name` in a `-v` log, or None if absent."""
    block = None
    for m in re.finditer(r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores,"
                         r" (\d+) bytes spill loads", log):
        if m.group(1) == name:
            block = m
    return int(block.group(3)) if block else None


def kernel_resources(kernel: Any, ptxas_log: str = "") -> dict[str, Any]:
    """Resources of one Triton CompiledKernel: name, hash, shared, registers, spills, launch options."""
    md = kernel.metadata
    name = getattr(md, "name", "") or ""
    out: dict[str, Any] = {
        "name": name, "hash": getattr(md, "hash", getattr(kernel, "hash", "")),
        "shared": int(getattr(md, "shared", 0) or 0),
        "num_warps": int(getattr(md, "num_warps", 0) or 0), "num_stages": int(getattr(md, "num_stages", 0) or 0),
    }
    cubin = kernel.asm.get("cubin") if hasattr(kernel, "asm") else None
    usage = cubin_usage(cubin, name) if cubin else {}
    out["registers"] = usage.get("registers")
    out["stack_bytes"] = usage.get("stack")
    # Judge spills by the stack frame cuobjdump reads from the cubin (spilled registers live there): it is
    # known whether or not this process compiled the kernel, so a cached kernel is judged like a fresh one.
    # The ptxas count of spill stores is kept for information when this process ran ptxas.
    out["spill_stores"] = ptxas_spills(ptxas_log, name) if ptxas_log else None
    out["spills"] = usage.get("stack") if usage else out["spill_stores"]
    return out

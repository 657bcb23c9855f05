"""Fault classification: exception texts and types from Triton, torch and the CUDA driver -> statuses."""

import pytest

from evo.evaluate.faults import classify, useful_lines
from evo.store.record import STATUSES

TABLE = [
    # (text, phase, status, fatal)
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "run", "crashed", True),
    ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
     "asynchronously reported", "run", "crashed", True),
    ("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered", "run", "crashed", True),
    ("RuntimeError: Triton Error [CUDA]: unspecified launch failure", "run", "crashed", True),
    ("RuntimeError: CUDA error: misaligned address", "run", "crashed", True),
    ("RuntimeError: CUDA error: device-side assert triggered", "run", "crashed", True),
    ("CUDA_ERROR_ILLEGAL_INSTRUCTION", "run", "crashed", True),
    ("OutOfResources: out of resource: shared memory, Required: 262144, Hardware limit: 232448. Reducing block "
     "sizes or `num_stages` may help.", "run", "out_of_resources", False),
    ("RuntimeError: Triton Error [CUDA]: too many resources requested for launch", "run", "out_of_resources", False),
    ("ptxas error   : Entry function 'k' uses too much shared data (0x40000 bytes, 0xe300 max)", "compile",
     "out_of_resources", False),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 GiB", "run", "error", False),
    ("PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\nptxas fatal : Unresolved extern function",
     "compile", "compile_error", False),
    ("triton.compiler.errors.CompilationError: at 7:29:\n    tl.store(out_ptr + offs, tl.nope(val))\n"
     "AttributeError: module 'triton.language' has no attribute 'nope'", "compile", "compile_error", False),
    ("LLVM ERROR: Failed to compute parent layout for slice layout.", "compile", "compile_error", False),
    ("RuntimeError: PassManager::run failed", "compile", "compile_error", False),
    # a compile process whose torch import was interrupted fails every later task: that is no verdict on a kernel
    ("AttributeError: partially initialized module 'torch' has no attribute 'fx' (most likely due to a circular "
     "import)", "compile", "error", False),
    ("KeyboardInterrupt", "compile", "error", False),
    ("TimeoutError: no reply within 60 s", "run", "timeout", False),
    ("ValueError: something odd in the launcher", "run", "error", False),
    ("ValueError: something odd in the launcher", "compile", "compile_error", False),
    ("", "run", "error", False),
]


@pytest.mark.parametrize("text,phase,status,fatal", TABLE)
def test_texts_classify(text, phase, status, fatal):
    fault = classify(text, phase=phase)
    assert (fault.status, fault.fatal) == (status, fatal)
    assert fault.status in STATUSES


class OutOfResources(Exception):  # same name as Triton's: classification goes by type name, across versions
    pass


class CompilationError(Exception):
    pass


def test_exception_types_classify():
    assert classify(OutOfResources("shared memory")).status == "out_of_resources"
    assert classify(CompilationError("at 1:2: bad")).status == "compile_error"
    assert classify(SyntaxError("'(' was never closed"), phase="run").status == "compile_error"
    assert classify(TimeoutError()).status == "timeout"
    assert classify(KeyError("x")).status == "error"


def test_wrapped_cause_is_seen():
    try:
        try:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        except RuntimeError as inner:
            raise ValueError("launch failed") from inner
    except ValueError as exc:
        fault = classify(exc)
    assert fault.status == "crashed" and fault.fatal
    assert "illegal memory access" in fault.reason


def test_reason_keeps_the_informative_tail():
    text = "Traceback (most recent call last):\n  File \"x.py\", line 3, in f\n" + "filler\n" * 500 + "the real error"
    reason = useful_lines(text, limit=200)
    assert reason.endswith("the real error") and len(reason) <= 200
    assert "Traceback" not in reason and 'File "x.py"' not in reason


def test_bad_phase_is_rejected():
    with pytest.raises(ValueError, match="phase"):
        classify("x", phase="later")

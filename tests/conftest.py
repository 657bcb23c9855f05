"""Test set-up: without CUDA, Triton kernels run in the interpreter on CPU tensors."""

import os

import pytest


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


HAS_CUDA = _cuda()
if not HAS_CUDA:
    # must be set before any @triton.jit runs, i.e. before rendered modules are imported
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # and before triton is first imported: its own @jit helpers (tl.cdiv, tl.sum, ...) are decorated then, once, for
    # the mode of that moment. A test that compiles ahead with TRITON_INTERPRET=0 must not be the first importer,
    # or every kernel the interpreter runs afterwards fails on them (whichever test happened to run first).
    import triton  # noqa: F401, E402


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _results_db(tmp_path_factory, monkeypatch):
    """Every test gets its own shared results database (evo.store.shared), never the user's cache."""
    monkeypatch.setenv("EVO_RESULTS_DB", str(tmp_path_factory.mktemp("results") / "results.sqlite"))


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory):
    """The tiny model's collected zoo module (tests/fixtures/tiny_zoo.py), built once for the session."""
    from tests.fixtures.tiny_zoo import make_tiny_zoo

    return make_tiny_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="session")
def tiny_fp8_zoo(tmp_path_factory):
    """The tiny model's collected FP8 zoo module (tests/fixtures/tiny_fp8_zoo.py), built once for the session."""
    from tests.fixtures.tiny_fp8_zoo import make_tiny_fp8_zoo

    return make_tiny_fp8_zoo(tmp_path_factory.mktemp("fp8_zoo"))

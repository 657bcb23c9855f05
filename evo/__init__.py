"""evo: evolutionary quality-diversity search over Triton kernels. Importing it does no work."""

__version__ = "0.1.0"


def __getattr__(name: str):  # evo.load and evo.LoadError, imported on first use (importing evo does no work)
    if name in ("load", "LoadError", "as_torch_op"):
        from evo import api

        return getattr(api, name)
    raise AttributeError(f"module 'evo' has no attribute {name!r}")

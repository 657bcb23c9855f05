"""`ModelError`: a bad model file, in one line naming the file and the field (evo.zoo.model re-exports it)."""

from __future__ import annotations

from evo.experiment.oneline import one_line

__all__ = ["ModelError"]


class ModelError(ValueError):
    """A bad model file. The message is one line: `FILE: FIELD: what was expected, got what`."""

    def __init__(self, file: str, field: str, message: str) -> None:
        self.file, self.field = file, field
        super().__init__(one_line(f"{file}: {field}: {message}" if field else f"{file}: {message}"))

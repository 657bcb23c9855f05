"""Reading an experiment's YAML: a loader that refuses repeated keys, and typed accessors that fail with a
`ConfigError` naming the file and the key path (evo.experiment.config builds the Experiment with them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import yaml

from evo.experiment import limits
from evo.experiment.oneline import one_line

__all__ = ["ConfigError", "Checker", "UniqueKeyLoader", "describe"]


class ConfigError(ValueError):
    """A bad experiment file. The message is one line: `FILE: KEY.PATH: what was expected, got what`."""

    def __init__(self, file: str, path: str, message: str) -> None:
        self.file, self.path = file, path
        text = f"{file}: {path}: {message}" if path else f"{file}: {message}"
        super().__init__(one_line(text))  # one line, whatever the message held


class UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses repeated keys (plain PyYAML silently keeps the last one)."""


def _construct_unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Checker:
    """Typed accessors that raise ConfigError naming the file and the key path."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, message: str) -> ConfigError:
        return ConfigError(self.file, path, message)

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping with keys {', '.join(allowed)}; got {describe(value)}")
        for key in value:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                raise self.fail(where, f"unknown key; expected one of {', '.join(allowed)}")
        for key in required:
            if key not in value:
                raise self.fail(f"{path}.{key}" if path else key, "is required")
        return value

    def integer(self, value: Any, path: str, low: int | None = None, none_ok: bool = False) -> int | None:
        if value is None and none_ok:
            return None
        ok = isinstance(value, int) and not isinstance(value, bool) and (low is None or value >= low)
        if not ok:
            bound = f" >= {low}" if low is not None else ""
            raise self.fail(path, f"expected an integer{bound}{' or null' if none_ok else ''}; got {describe(value)}")
        self.ceiling(path, value)
        return int(value)

    def number(self, value: Any, path: str, low: float, high: float | None = None, low_open: bool = True,
               none_ok: bool = False) -> float | None:
        if value is None and none_ok:
            return None
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)
        ok = ok and (value > low if low_open else value >= low) and (high is None or value < high)
        if not ok:
            rng = f"{'>' if low_open else '>='} {low}" + (f" and < {high}" if high is not None else "")
            raise self.fail(path, f"expected a number {rng}{' or null' if none_ok else ''}; got {describe(value)}")
        self.ceiling(path, value)
        return float(value)

    def ceiling(self, path: str, value: float, smoke: bool = False) -> None:
        problem = limits.check_ceiling(path, value, smoke)
        if problem:
            raise self.fail(path, problem)

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false; got {describe(value)}")
        return value

    def string(self, value: Any, path: str, none_ok: bool = False) -> str | None:
        if value is None and none_ok:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(path, f"expected a non-empty string{' or null' if none_ok else ''}; got {describe(value)}")
        return value

    def choice(self, value: Any, path: str, choices: list[str] | tuple[str, ...], what: str = "") -> str:
        if not isinstance(value, str) or value not in choices:
            raise self.fail(path, f"unknown {what or 'value'} {describe(value)}; expected one of {', '.join(choices)}")
        return value

    def listing(self, value: Any, path: str) -> list:
        if not isinstance(value, list) or not value:
            raise self.fail(path, f"expected a non-empty list; got {describe(value)}")
        return value

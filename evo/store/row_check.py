"""Reading a stored row as untrusted input: a store is a file anyone can edit (sqlite3, a sync tool, a bad disk).

SQLite keeps whatever a column is given (text in a REAL column, '[1,2]' as a problem), so a row that decodes into
an `Evaluation` may still break every reader that trusts it. `decode_row` checks each column's kind and that the
problem and genome parse as what `Candidate.row` wrote; a row that fails raises `BadRow`, which the store
counts and skips (`Skipped`), so one damaged row costs that row, never the command. A flipped byte can also leave
text that is not UTF-8, which Python's sqlite3 refuses to read at all: the store then reads text through
`tolerant_text`, which marks such a value as `Garbled`, and its row is skipped like any other damaged row.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, fields
from typing import Any

from evo.problem import Problem
from evo.store.record import Evaluation

__all__ = ["BadRow", "Garbled", "Skipped", "decode_row", "tolerant_text"]

_JSON_KINDS = {"versions": dict, "times_ms": list, "resources": dict, "parents": list}


class BadRow(ValueError):
    """A stored row that does not decode into a usable evaluation; the message says which column and why."""


class Garbled(str):
    """Stored text that is not UTF-8, read with its bad bytes replaced (U+FFFD): never a value to trust."""


def tolerant_text(raw: bytes) -> str:
    """A sqlite3 text factory: the text, or a `Garbled` copy of it where its bytes are not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return Garbled(raw.decode("utf-8", "replace"))


# Each field's kind, from its annotation (record.py postpones annotations, so they are strings): checked once per row
_TEXT_FIELDS = tuple(f.name for f in fields(Evaluation) if str(f.type) == "str")
_NUMBER_FIELDS = tuple(f.name for f in fields(Evaluation) if str(f.type) in ("float", "float | None"))


def _json(row: dict[str, Any], name: str, kind: type) -> Any:
    """The column's JSON value, checked to be of `kind`; an empty or NULL column is an empty one."""
    text = row.get(name)
    if text in (None, ""):
        return kind()
    if not isinstance(text, str):
        raise BadRow(f"{name} is not JSON text")
    value = _parsed(text)
    if value is _NOT_JSON:
        raise BadRow(f"{name} is not valid JSON")
    if not isinstance(value, kind):
        raise BadRow(f"{name} is not a JSON {'object' if kind is dict else 'list'}")
    return kind(value)  # a copy: rows that stored the same text (versions, resources) never share one value


_NOT_JSON = object()


@functools.lru_cache(maxsize=4096)  # versions and resources repeat over most of a store's rows
def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON


# Every row of a problem holds the same problem text, and a genome recurs across problems: each text is parsed once
@functools.lru_cache(maxsize=4096)
def _problem_identity(text: str) -> tuple[str, str] | None:
    """(key, operator) of a stored problem, or None when it does not decode."""
    try:
        problem = Problem.from_json(text)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return problem.key, problem.operator


@functools.lru_cache(maxsize=4096)
def _genome_is_object(text: str) -> str:
    """'' for a stored genome that is a JSON object of genes, else why not."""
    try:
        genome = json.loads(text)
    except ValueError:
        return "genome is not valid JSON"
    if not isinstance(genome, dict) or not isinstance(genome.get("genes", {}), dict):
        return "genome is not a JSON object of genes"
    return ""


def _problem(row: dict[str, Any]) -> None:
    text = row.get("problem")
    identity = _problem_identity(text) if isinstance(text, str) else None
    if identity is None:
        raise BadRow("problem does not decode")
    key, operator = identity
    if key != row.get("problem_key") or operator != row.get("operator"):
        raise BadRow(f"problem {key!r} does not match the row's problem_key {row.get('problem_key')!r}"[:300])


def _genome(row: dict[str, Any]) -> None:
    text = row.get("genome")
    why = _genome_is_object(text) if isinstance(text, str) else "genome is not valid JSON"
    if why:
        raise BadRow(why)


def _scalars(values: dict[str, Any]) -> None:
    """Each column holds the kind its field's annotation names: a text column holding a number (or the reverse)
    would fail far from here, in a sort or a format string. A text column an older evo left NULL reads as empty.
    (Exact type tests first: this runs for every row a command reads.)"""
    for name in _TEXT_FIELDS:
        if name in values and type(values[name]) is not str:
            if values[name] is None:
                values[name] = ""
            elif not isinstance(values[name], str):
                raise BadRow(f"{name} is not text")
    for name in _NUMBER_FIELDS:
        value = values.get(name)
        kind = type(value)
        if kind is float:
            if value != value:  # NaN
                raise BadRow(f"{name} is not a number")
        elif value is not None and kind is not int:  # text, bytes, a bool
            raise BadRow(f"{name} is not a number")
    if not set(map(type, values["times_ms"])) <= _NUMBERS:
        raise BadRow("times_ms holds something other than numbers")
    if not set(map(type, values["parents"])) <= _TEXT:
        raise BadRow("parents holds something other than genome hashes")


_NUMBERS, _TEXT = {int, float}, {str}


def decode_row(row: dict[str, Any]) -> Evaluation:
    """The `Evaluation` of one stored row (a dict of its columns); raises BadRow when it is damaged. Each JSON
    column is parsed once (as Evaluation.from_row would, after checking it)."""
    if Garbled in map(type, row.values()):  # (rare: looked for by name only then)
        raise BadRow(f"{next(k for k, v in row.items() if isinstance(v, Garbled))} is not UTF-8 text")
    values = dict(row)
    for name, kind in _JSON_KINDS.items():
        values[name] = _json(row, name, kind)
    _problem(row)
    _genome(row)
    _scalars(values)
    values.pop("versions_key", None)
    if not values.get("objective"):  # a row of an older store: judged by GPU time then
        values.pop("objective", None)
    try:
        return Evaluation(**values)
    except (ValueError, TypeError) as e:  # an unknown status, a missing or extra column
        raise BadRow(str(e).splitlines()[0] if str(e) else type(e).__name__) from None


@dataclass
class Skipped:
    """The rows a store skipped while reading, by id with the first reason, for one warning line."""

    reasons: dict[int, str] = field(default_factory=dict)

    def add(self, row_id: Any, reason: str) -> None:
        self.reasons.setdefault(row_id if isinstance(row_id, int) else -1, reason)

    def __len__(self) -> int:
        return len(self.reasons)

    def summary(self) -> str:
        """E.g. "2 damaged rows (id 7: problem does not decode; also id 9)"."""
        ids = sorted(self.reasons)
        first = ids[0]
        more = f"; also id {', '.join(map(str, ids[1:6]))}{' ...' if len(ids) > 6 else ''}" if len(ids) > 1 else ""
        return f"{len(ids)} damaged row{'' if len(ids) == 1 else 's'} (id {first}: {self.reasons[first]}{more})"

    def line(self, path: Any) -> str:
        """The warning a reader prints once: "PATH: 2 damaged rows (...) skipped"."""
        return f"{path}: {self.summary()} skipped"

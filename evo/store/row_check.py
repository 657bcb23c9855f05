"""Reading a stored row as untrusted input: a store is a file anyone can edit (sqlite3, a sync tool, a bad disk).

SQLite keeps whatever a column is given (text in a REAL column, '[1,2]' as a problem), so a row that decodes into
an `Evaluation` may still break every reader that trusts it. `decode_row` checks each column's kind and that the
problem and genome parse as what `Candidate.row` wrote; a row that fails raises `BadRow`, which the store
counts and skips (`Skipped`), so one damaged row costs that row, never the command. A flipped byte can also leave
text that is not UTF-8, which Python's sqlite3 refuses to read at all: the store then reads text through
`tolerant_text`, which marks such a value as `Garbled`, and its row is skipped like any other damaged row.
"""

from __future__ import annotations

import json
import math
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


def _json(row: dict[str, Any], name: str, kind: type) -> None:
    text = row.get(name)
    if text in (None, ""):
        return
    if not isinstance(text, str):
        raise BadRow(f"{name} is not JSON text")
    try:
        value = json.loads(text)
    except ValueError:
        raise BadRow(f"{name} is not valid JSON") from None
    if not isinstance(value, kind):
        raise BadRow(f"{name} is not a JSON {'object' if kind is dict else 'list'}")


def _problem(row: dict[str, Any]) -> None:
    try:
        problem = Problem.from_json(row["problem"])
    except (ValueError, TypeError, KeyError, AttributeError):
        raise BadRow("problem does not decode") from None
    if problem.key != row.get("problem_key") or problem.operator != row.get("operator"):
        raise BadRow(f"problem {problem.key!r} does not match the row's problem_key {row.get('problem_key')!r}"[:300])


def _genome(row: dict[str, Any]) -> None:
    try:
        genome = json.loads(row["genome"])
    except (ValueError, TypeError):
        raise BadRow("genome is not valid JSON") from None
    if not isinstance(genome, dict) or not isinstance(genome.get("genes", {}), dict):
        raise BadRow("genome is not a JSON object of genes")


def _scalars(ev: Evaluation) -> None:
    """Each field holds the kind its annotation names: a text column holding a number (or the reverse) would
    fail far from here, in a sort or a format string."""
    for f in fields(ev):
        value = getattr(ev, f.name)
        kind = str(f.type)
        if kind == "str" and value is None:  # a column an older evo left NULL: empty, as it would write it now
            setattr(ev, f.name, "")
        elif kind == "str" and not isinstance(value, str):
            raise BadRow(f"{f.name} is not text")
        if kind in ("float", "float | None") and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise BadRow(f"{f.name} is not a number")
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in ev.times_ms):
        raise BadRow("times_ms holds something other than numbers")
    if not all(isinstance(p, str) for p in ev.parents):
        raise BadRow("parents holds something other than genome hashes")


def decode_row(row: dict[str, Any]) -> Evaluation:
    """The `Evaluation` of one stored row (a dict of its columns); raises BadRow when it is damaged."""
    garbled = next((name for name, value in row.items() if isinstance(value, Garbled)), None)
    if garbled is not None:
        raise BadRow(f"{garbled} is not UTF-8 text")
    for name, kind in _JSON_KINDS.items():
        _json(row, name, kind)
    _problem(row)
    _genome(row)
    try:
        ev = Evaluation.from_row(row)
    except (ValueError, TypeError, KeyError) as e:  # an unknown status, a missing or extra column
        raise BadRow(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    _scalars(ev)
    return ev


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

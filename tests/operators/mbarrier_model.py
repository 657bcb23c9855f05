"""A model of the mbarrier protocols of evo's Gluon kernels, for the CPU: roles as Python generators, barriers with
Hopper's phase-parity semantics, TMA loads that land at random later times, and a scheduler that interleaves the
roles at random. It checks what the GPU cannot show in a test that passes: that no interleaving deadlocks, and that
every role reads, and keeps until it releases, the tile it expects (a wait that passes a round early reads another
step's data; the H100 found exactly that in the first Gluon GEMM ping-pong, and this model finds it too).

It models the protocol the renderers write (operators/*/gluon_source.py), not their code: a change to a kernel's
barriers must be made here as well.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Barrier", "Machine", "ProtocolError", "run"]


class ProtocolError(AssertionError):
    """A deadlock, a barrier arrived on beyond its count, or a role that read a tile it did not expect."""


@dataclass
class Barrier:
    """An mbarrier: a phase completes when `count` arrivals (and every expected TMA load) have come in.
    `passed(parity)` is mbarrier.try_wait.parity: true once the phase of that parity has completed, i.e. while
    the phase in progress has the other parity (a fresh barrier passes parity 1 at once)."""

    name: str
    count: int = 1
    arrived: int = 0
    loads: int = 0  # expected TMA loads not landed yet
    phases: int = 0  # completed phases

    def arrive(self, n: int = 1) -> None:
        self.arrived += n
        if self.arrived > self.count:
            raise ProtocolError(f"{self.name}: {self.arrived} arrivals on a barrier of count {self.count}")
        self._complete()

    def expect(self) -> None:
        """mbarrier.expect: one arrival, and one load to land before the phase completes."""
        self.loads += 1
        self.arrive()

    def landed(self) -> None:
        self.loads -= 1
        self._complete()

    def _complete(self) -> None:
        if self.arrived == self.count and self.loads == 0:
            self.arrived = 0
            self.phases += 1

    def passed(self, parity: int) -> bool:
        return (self.phases & 1) != parity


@dataclass
class Machine:
    """Shared memory (buffer name -> the tag of what it holds) and the TMA loads in flight."""

    rng: random.Random
    buffers: dict[str, Any] = field(default_factory=dict)
    in_flight: list[Callable[[], None]] = field(default_factory=list)

    def load(self, bar: Barrier, buffer: str, tag: Any) -> None:
        """An asynchronous TMA load of `tag` into `buffer`, arriving on `bar` (expect + copy)."""
        bar.expect()

        def land() -> None:
            self.buffers[buffer] = tag
            bar.landed()

        self.in_flight.append(land)

    def check(self, role: str, buffer: str, tag: Any) -> None:
        if self.buffers.get(buffer) != tag:
            raise ProtocolError(f"{role} expected {tag} in {buffer}, found {self.buffers.get(buffer)}")


Role = Generator[Callable[[], bool] | None, None, None]


def run(roles: dict[str, Role], machine: Machine, max_steps: int = 1_000_000) -> None:
    """Interleave the roles and the landing of loads at random until every role has finished. A role yields a
    condition to wait on (or None to let others run); it resumes once the condition holds. Raises ProtocolError
    on a deadlock (no role can go on and no load is in flight)."""
    waiting: dict[str, Callable[[], bool] | None] = {name: None for name in roles}
    live = dict(roles)
    for _ in range(max_steps):
        if not live and not machine.in_flight:
            return
        ready = [name for name in live if waiting[name] is None or waiting[name]()]
        choices: list[Any] = ready + (["load"] if machine.in_flight else [])
        if not choices:
            raise ProtocolError(f"deadlock: {sorted(live)} wait and no load is in flight")
        pick = machine.rng.choice(choices)
        if pick == "load":
            machine.in_flight.pop(machine.rng.randrange(len(machine.in_flight)))()
            continue
        try:
            waiting[pick] = next(live[pick])
        except StopIteration:
            del live[pick]
    raise ProtocolError("the model ran out of steps")


def barriers(name: str, n: int, count: int = 1) -> list[Barrier]:
    return [Barrier(f"{name}[{i}]", count) for i in range(n)]


def seeds(n: int) -> Iterable[random.Random]:
    return (random.Random(i) for i in range(n))

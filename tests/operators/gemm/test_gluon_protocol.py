"""The mbarrier protocol of the Gluon GEMM (operators/gemm/gluon_kernel.py) in the CPU model of
tests/operators/mbarrier_model.py: a persistent program's producer fills a ring with every K step of its work items
in order; one consumer takes every item (cooperative), two take alternate items (ping-pong), or two or three take
their own rows of every item (row split: a slot is free once each consumer released it). Under random
interleavings no protocol deadlocks and every consumer reads, and keeps until it frees the slot, its own item's
step. The model also finds the bug an H100 found in the first ping-pong (consumers without turns: the second one
waited on a slot's parity a round early and read the first one's data)."""

from __future__ import annotations

import itertools

import pytest

from tests.operators.mbarrier_model import Machine, ProtocolError, barriers, run, seeds


def gemm_roles(m: Machine, items: int, k_steps: int, stages: int, consumers: int, turns_on: bool = True,
               rows: bool = False, empty_count: int | None = None) -> dict:
    """The roles of one program over `items` work items (tiles, or tile x K-range with split-K) of `k_steps`;
    `rows`: every consumer takes every item (its own rows), the `empty` barriers counting `empty_count`
    arrivals (the rendering's: one per consumer)."""
    count = (consumers if rows else 1) if empty_count is None else empty_count
    ready, empty, turns = barriers("ready", stages), barriers("empty", stages, count), barriers("turns", 2)

    def producer():
        for step in range(items * k_steps):
            s = step % stages
            yield lambda s=s, t=step: empty[s].passed(((t // stages) & 1) ^ 1)
            m.load(ready[s], f"ab{s}", (step // k_steps, step % k_steps))

    def consumer(c):
        role = f"consumer {c}"
        for mine, item in enumerate(range(0, items, 1) if rows else range(c, items, consumers)):
            step = item * k_steps
            if consumers > 1 and turns_on and not rows:
                yield lambda mine=mine: turns[c].passed((mine & 1) ^ (1 - c))
            for kk in range(k_steps):
                s = step % stages
                yield lambda s=s, t=step: ready[s].passed((t // stages) & 1)
                m.check(role, f"ab{s}", (item, kk))
                yield None  # the wgmma in flight; the previous one retires
                if kk > 0:
                    m.check(role, f"ab{(step - 1) % stages}", (item, kk - 1))
                    empty[(step - 1) % stages].arrive()
                step += 1
            if consumers > 1 and turns_on and not rows:
                turns[1 - c].arrive()
            m.check(role, f"ab{(step - 1) % stages}", (item, k_steps - 1))
            empty[(step - 1) % stages].arrive()

    return {"producer": producer(), **{f"consumer {c}": consumer(c) for c in range(consumers)}}


@pytest.mark.parametrize("stages, consumers, k_steps", list(itertools.product((2, 3, 4, 5), (1, 2), (1, 2, 3, 7))))
def test_no_interleaving_deadlocks_or_reads_another_steps_tile(stages, consumers, k_steps):
    for rng in seeds(40):
        m = Machine(rng)
        run(gemm_roles(m, rng.randint(1, 6), k_steps, stages, consumers), m)


def test_the_model_finds_the_ping_pong_bug_the_gpu_found():
    """Two consumers without turns: some interleaving reads another item's step (the H100 faulted on it)."""
    found = []
    for rng in seeds(100):
        m = Machine(rng)
        try:
            run(gemm_roles(m, 4, 4, 3, 2, turns_on=False), m)
        except ProtocolError as e:
            found.append(str(e))
    assert any("expected" in e for e in found)


@pytest.mark.parametrize("stages, consumers, k_steps", list(itertools.product((2, 3, 4), (2, 3), (1, 2, 5))))
def test_row_split_consumers_never_deadlock_or_read_another_steps_tile(stages, consumers, k_steps):
    for rng in seeds(40):
        m = Machine(rng)
        run(gemm_roles(m, rng.randint(1, 5), k_steps, stages, consumers, rows=True), m)


def test_a_row_split_slot_freed_by_the_first_consumer_alone_is_caught():
    """With `empty` counting one arrival, the fastest consumer frees a slot the others still read: the producer
    overwrites it and some interleaving has a slower consumer read the next round's tile."""
    found = []
    for rng in seeds(100):
        m = Machine(rng)
        try:
            run(gemm_roles(m, 4, 3, 2, 3, rows=True, empty_count=1), m)
        except ProtocolError as e:
            found.append(str(e))
    assert found

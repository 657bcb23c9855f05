"""The mbarrier protocol of the Gluon attention kernel (operators/attention/gluon_kernel.py), run in the CPU model of
tests/operators/mbarrier_model.py under thousands of random interleavings: for every ring depth, one or two
consumers, with and without overlap, ping-pong and a persistent grid over work items of different lengths, no
interleaving deadlocks and every consumer reads (and keeps until it frees the slot) the query tile, keys and values
of its own work item and block."""

from __future__ import annotations

import itertools

import pytest

from tests.operators.mbarrier_model import Machine, ProtocolError, barriers, run, seeds


def attention_roles(m: Machine, items: list[int], stages: int, consumers: int, overlap: bool, pingpong: bool,
                    persistent: bool, q_empty_wait: bool = True) -> dict:
    """The producer and the consumers of one program, over `items` (key blocks per work item, in issue order).
    `q_empty_wait=False` leaves out the persistent producer's wait for the query tile (a broken protocol)."""
    q_ready, q_empty = barriers("q_ready", consumers), barriers("q_empty", consumers)
    k_ready, v_ready = barriers("k_ready", stages), barriers("v_ready", stages)
    empty, turns = barriers("empty", stages, count=consumers), barriers("turns", 2)

    def producer():
        step = 0
        for i, n in enumerate(items):
            for c in range(consumers):
                if persistent and q_empty_wait:
                    yield lambda c=c, i=i: q_empty[c].passed((i & 1) ^ 1)
                m.load(q_ready[c], f"q{c}", i)
            for j in range(n):
                s = (step + j) % stages
                yield lambda s=s, t=step + j: empty[s].passed(((t // stages) & 1) ^ 1)
                m.load(k_ready[s], f"k{s}", (i, j))
                m.load(v_ready[s], f"v{s}", (i, j))
            step += n

    def consumer(c):
        role, step, turn = f"consumer {c}", 0, 0

        def ready(bar, t):
            return lambda: bar[t % stages].passed((t // stages) & 1)

        def release(t, i, j):  # the slot still holds this block when it is freed
            m.check(role, f"k{t % stages}", (i, j))
            m.check(role, f"v{t % stages}", (i, j))
            empty[t % stages].arrive()

        for i, n in enumerate(items):
            yield lambda i=i: q_ready[c].passed(i & 1)
            m.check(role, f"q{c}", i)
            yield ready(k_ready, step)
            m.check(role, f"k{step % stages}", (i, 0))
            for j in range(1, n):
                t = step + j
                if overlap:
                    yield ready(k_ready, t)
                    if pingpong:
                        yield ready(v_ready, t - 1)
                        yield lambda t=turn + j - 1: turns[c].passed((t & 1) ^ (1 - c))
                    m.check(role, f"k{t % stages}", (i, j))  # S_j issued
                    if not pingpong:
                        yield ready(v_ready, t - 1)
                    m.check(role, f"v{(t - 1) % stages}", (i, j - 1))  # P V of block j - 1 issued
                    if pingpong:
                        turns[1 - c].arrive()
                    yield None  # the softmax, under the products
                    release(t - 1, i, j - 1)
                else:
                    yield ready(v_ready, t - 1)
                    m.check(role, f"v{(t - 1) % stages}", (i, j - 1))
                    release(t - 1, i, j - 1)
                    yield ready(k_ready, t)
                    m.check(role, f"k{t % stages}", (i, j))
            if persistent:
                m.check(role, f"q{c}", i)
                q_empty[c].arrive()
            yield ready(v_ready, step + n - 1)
            release(step + n - 1, i, n - 1)
            step, turn = step + n, turn + n - 1

    return {"producer": producer(), **{f"consumer {c}": consumer(c) for c in range(consumers)}}


CONFIGS = [(s, c, ov, pp, ps) for s, c, ov, pp, ps in itertools.product((2, 3, 4), (1, 2, 3), (False, True),
                                                                        (False, True), (False, True))
           if not pp or (c == 2 and ov)]


@pytest.mark.parametrize("stages, consumers, overlap, pingpong, persistent", CONFIGS)
def test_no_interleaving_deadlocks_or_reads_another_blocks_tile(stages, consumers, overlap, pingpong, persistent):
    for rng in seeds(60):
        items = [rng.randint(1, 7) for _ in range(rng.randint(2, 4) if persistent else 1)]
        m = Machine(rng)
        run(attention_roles(m, items, stages, consumers, overlap, pingpong, persistent), m)


def test_the_model_catches_a_ring_one_slot_too_shallow_for_overlap():
    """A consumer that frees block j - 1 only after it has taken block j holds two slots: a one-slot ring (which
    validity refuses for the Gluon rendering) deadlocks, and the model says so."""
    m = Machine(next(iter(seeds(1))))
    with pytest.raises(ProtocolError, match="deadlock"):
        run(attention_roles(m, [4], 1, 1, True, False, False), m)


def test_the_model_catches_a_persistent_producer_that_does_not_wait_for_the_query_tile():
    """Without the query tile's empty barrier a persistent producer overwrites a tile a consumer still reads."""
    caught = 0
    for rng in seeds(200):
        m = Machine(rng)
        try:
            run(attention_roles(m, [3, 3, 3], 2, 2, True, False, True, q_empty_wait=False), m)
        except ProtocolError as e:
            caught += "expected" in str(e)
    assert caught > 0

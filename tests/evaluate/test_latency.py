"""The compile-ahead window follows Little's law: as many compiles under way as it takes to feed every worker
while they compile, never more than the compile pool, none until both stages have been timed."""

from evo.evaluate.latency import Latency


def test_latency_sizes_the_compile_ahead():
    lat = Latency()
    assert lat.compile_ahead(8, 32) == 0  # nothing timed yet: the fixed window only
    lat.compiled(0.2)
    assert lat.compile_ahead(8, 32) == 0
    lat.measured(0.1)
    assert lat.compile_ahead(8, 32) == 16  # 8 workers, compiles twice as slow as measurements
    assert lat.compile_ahead(8, 10) == 10  # never more than the compile pool
    for _ in range(100):
        lat.compiled(0.045)
    assert lat.compile_ahead(8, 32) == 4

"""The pipeline's occupancy is the time-weighted mean and the largest count of each stage since the last restart,
with a clock the test moves."""

import pytest

from evo.evaluate.occupancy import STAGES, Occupancy


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_means_are_weighted_by_time_and_maxima_kept():
    clock = Clock()
    occ = Occupancy(clock)
    occ.observe(waiting=4, ready=1)
    clock.now += 1.0
    occ.observe(waiting=0)  # 4 waiting for 1 s, then none for 3 s; ready stays 1 throughout
    clock.now += 3.0
    s = occ.summary()
    assert s["seconds"] == 4.0
    assert s["waiting"] == {"mean": 1.0, "max": 4} and s["ready"] == {"mean": 1.0, "max": 1}
    assert s["compiling"] == {"mean": 0.0, "max": 0} and set(s) == {"seconds", *STAGES}


def test_restart_forgets_the_past_but_keeps_the_counts_now():
    clock = Clock()
    occ = Occupancy(clock)
    occ.observe(waiting=9, at_workers=2)
    clock.now += 5.0
    occ.restart()
    clock.now += 2.0
    s = occ.summary()
    assert s["waiting"] == {"mean": 9.0, "max": 9} and s["at_workers"] == {"mean": 2.0, "max": 2}
    assert s["seconds"] == 2.0


def test_an_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="unknown pipeline stage"):
        Occupancy().observe(queued=1)

"""SIGTERM and SIGHUP stop `evo run` the way Ctrl-C does, and a second Ctrl-C does not cut the stop short.

`timeout`, systemd, batch schedulers and a closed terminal send these, not SIGINT; by default Python dies on them
without running any cleanup. Raising KeyboardInterrupt instead sends them down the path Ctrl-C already takes: the
search records what completed, the executor shuts its workers down, the resume hint is printed; the exit status is
then the shell's 128 + signal. Only the first signal interrupts: one that follows while the run stops (two Ctrl-C
0.2 s apart, a scheduler's SIGTERM after a Ctrl-C) would raise in the middle of the clean-up (Ray's shutdown cut
halfway ends the process with status 1 and no hint), so repeats are absorbed for _ABSORB_S seconds, longer than a
stop takes; one after that interrupts again, for a stop that hangs.
"""

from __future__ import annotations

import signal
import time
from types import FrameType, TracebackType

__all__ = ["StopSignals"]

_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_ABSORB_S = 15.0  # a stop shuts Ray's workers down (each given up to 10 s) and Ray itself


class StopSignals:
    """While entered, SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread (the first of them; the
    ones that follow within _ABSORB_S seconds are absorbed). `received` is the first signal's number."""

    def __init__(self, absorb_s: float = _ABSORB_S) -> None:
        self.received: int | None = None
        self._absorb_s = absorb_s
        self._since = 0.0
        self._before: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.received is not None and now - self._since < self._absorb_s:
            return
        if self.received is None:
            self.received = signum
        self._since = now
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def reassert(self) -> None:
        """Take the signals back from whoever replaced the handlers since. A signal ignored before (`nohup` ignores
        SIGHUP, a shell's background job SIGINT) stays ignored."""
        for sig in _HANDLED:
            if self._before.get(sig) != signal.SIG_IGN and signal.getsignal(sig) != self._handle:
                signal.signal(sig, self._handle)

    def exit_status(self, default: int = 130) -> int:
        """128 + the signal that stopped the run (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP); `default` when
        none did."""
        return 128 + self.received if self.received is not None else default

    def __enter__(self) -> StopSignals:
        for sig in _HANDLED:
            self._before[sig] = signal.getsignal(sig)
        self.reassert()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
                 ) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

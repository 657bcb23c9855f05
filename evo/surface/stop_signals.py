"""SIGTERM and SIGHUP stop `evo run` the way Ctrl-C does.

`timeout`, systemd, batch schedulers and a closed terminal send these, not SIGINT; by default Python dies on them
without running any cleanup, and Ray's `init` replaces the SIGTERM handler with one that exits at once. Raising
KeyboardInterrupt instead sends them down the path Ctrl-C already takes: the search records what completed, the
executor shuts its workers down, the resume hint is printed; the exit status is then the shell's 128 + signal.
"""

from __future__ import annotations

import signal
from types import FrameType, TracebackType

__all__ = ["StopSignals"]

_HANDLED = (signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """While entered, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread (the first of them only: a
    second one during the shutdown it started must not interrupt the shutdown). `received` is the signal number."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._before: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return
        self.received = signum
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def reassert(self) -> None:
        """Take the signals back from whoever replaced the handlers since (Ray's init does, for SIGTERM)."""
        for sig in _HANDLED:
            if signal.getsignal(sig) != self._handle:
                signal.signal(sig, self._handle)

    def exit_status(self, default: int = 130) -> int:
        """128 + the signal that stopped the run (143 for SIGTERM, 129 for SIGHUP); `default` for Ctrl-C."""
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

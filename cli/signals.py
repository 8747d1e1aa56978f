"""SIGTERM and SIGINT as a request to stop, for every ``stepstream`` command that runs until stopped.

One pattern: :class:`StopSignals` installs a handler for both signals while inside its ``with``
block and restores the previous ones after. The first signal calls ``on_stop``; with
``interrupt_on_second`` a second one raises ``KeyboardInterrupt`` (for a thread stuck in a long
update), otherwise it is only counted. An event loop is woken with :func:`set_soon`, which is safe
from a signal handler (``call_soon_threadsafe`` writes the loop's self-pipe).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def set_soon(event: asyncio.Event) -> Callable[[], None]:
    """A callback that sets ``event`` on its (running) loop from any thread or signal handler."""
    loop = asyncio.get_running_loop()

    def set_event() -> None:
        loop.call_soon_threadsafe(event.set)

    return set_event


class StopSignals:
    """While inside: SIGTERM or SIGINT calls ``on_stop`` once; ``received`` lists the signals (main thread only).

    Args:
        on_stop: called on the first signal.
        interrupt_on_second: a second signal raises ``KeyboardInterrupt`` where the main thread is.
        what: how the log line of the first signal ends, e.g. "stopping after the current iteration".
    """

    def __init__(self, on_stop: Callable[[], None], *, interrupt_on_second: bool = False, what: str = "stopping") -> None:
        self.on_stop = on_stop
        self.interrupt_on_second = interrupt_on_second
        self.what = what
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        """128 + the first signal (130 for SIGINT, 143 for SIGTERM), as a shell reports it; 0 when none came."""
        return 128 + self.received[0] if self.received else 0

    def _handle(self, signum: int, unused_frame: FrameType | None) -> None:
        self.received.append(signum)
        if len(self.received) > 1:
            if self.interrupt_on_second:
                raise KeyboardInterrupt
            return
        again = " (send it again to interrupt)" if self.interrupt_on_second else ""
        # Not logged here: the handler runs on the main thread between its bytecodes, possibly in the
        # middle of that thread's own write to stderr, and re-entering the stream raises "reentrant
        # call" (seen as a hang at SIGTERM). A thread waits on the stream's lock instead.
        name = signal.Signals(signum).name
        threading.Thread(target=log.info, args=("%s received: %s%s", name, self.what, again), daemon=True).start()
        self.on_stop()

    def __enter__(self) -> StopSignals:
        self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def __exit__(
        self, unused_type: type[BaseException] | None, unused_exc: BaseException | None, unused_tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

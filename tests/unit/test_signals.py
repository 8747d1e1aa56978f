"""cli.signals: the stop handler's rules, with real signals sent to this process."""

from __future__ import annotations

import io
import logging
import signal
import threading
import time

import pytest

from cli.signals import StopSignals


class _OneWriterStream(io.StringIO):
    """A stream that, like ``io.BufferedWriter``, refuses to be re-entered, and sends SIGTERM mid-write.

    The first write raises SIGTERM to this process and then keeps executing bytecode, so Python runs the
    signal handler inside this write, as it does when a real SIGTERM lands during a write to stderr.
    """

    def __init__(self) -> None:
        super().__init__()
        self.writing = False
        self.signalled = False

    def write(self, text: str) -> int:
        if self.writing:
            raise RuntimeError("reentrant call inside the stream")
        self.writing = True
        try:
            if not self.signalled:
                self.signalled = True
                signal.raise_signal(signal.SIGTERM)
                for _ in range(1000):  # bytecode for the pending handler to run in
                    pass
            return super().write(text)
        finally:
            self.writing = False


def test_a_signal_during_a_log_write_does_not_reenter_the_stream() -> None:
    stream = _OneWriterStream()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    stopped = threading.Event()
    try:
        with StopSignals(stopped.set, what="stopping the test") as signals:
            logging.getLogger("test").info("a line being written when SIGTERM lands")
            assert stopped.is_set()
            assert signals.exit_code == 128 + signal.SIGTERM
            deadline = time.monotonic() + 10  # liveness bound: the deferred line is written by another thread
            while "SIGTERM received: stopping the test" not in stream.getvalue():
                if time.monotonic() > deadline:
                    pytest.fail(f"the signal's log line never came: {stream.getvalue()!r}")
                time.sleep(0.01)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    assert "a line being written when SIGTERM lands" in stream.getvalue()


def test_a_second_signal_interrupts_only_when_asked() -> None:
    calls: list[int] = []
    with StopSignals(lambda: calls.append(1)) as signals:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
    assert calls == [1] and signals.received == [signal.SIGINT, signal.SIGINT]
    with pytest.raises(KeyboardInterrupt), StopSignals(lambda: None, interrupt_on_second=True):
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)

"""A learner's warm-up: its update graph traced before the first update needs it, in the caller's thread or in one of
its own.

Why: tracing an update graph takes a CPU for a while. Traced in the caller's thread before the first policy is
published, it has the CPU to itself while the envs wait for that policy; traced in a thread of its own from the first
trajectories, the trainer's loop goes on taking trajectories meanwhile. Either way the learner waits for it
(``wait``) before anything that uses the update graph or the optimiser's slots: an update, a checkpoint, an export.

``PPOLearner`` and ``SACLearner`` each hold one ``WarmUp``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class WarmUp:
    """Runs ``trace`` at most once, after ``prepare`` in the caller's thread.

    ``prepare`` is what must not run in two threads at once (e.g. a first trace of Keras layers the caller goes on
    calling); ``trace`` is what may run beside the caller. An error of ``trace`` is raised by ``wait``, in the thread
    that waits, never lost in the warm-up's own thread; one of ``prepare`` by ``start``.
    """

    def __init__(
        self, trace: Callable[[], object], prepare: Callable[[], None] | None = None, *, name: str, pending: bool
    ) -> None:
        """Args:
        trace: traces (and instantiates) the update graph; trains nothing.
        prepare: run first, in the caller's thread (None: nothing).
        name: the warm-up thread's name.
        pending: False: nothing to warm up (``start`` does nothing), as learners built for tests choose.
        """
        self._trace = trace
        self._prepare = prepare
        self._name = name
        self._pending = pending
        self.thread: threading.Thread | None = None
        """The warm-up's thread while it may still run (``wait`` joins and clears it)."""
        self._error: BaseException | None = None

    def start(self, in_thread: bool) -> None:
        """Starts the warm-up unless started before: ``prepare``, then ``trace`` in the caller's thread (and waits for
        it, raising its error) or in a thread of its own (``wait`` waits for it)."""
        if not self._pending:
            return
        self._pending = False
        if self._prepare is not None:
            self._prepare()
        if not in_thread:
            self._run()
            self.wait()
            return
        self.thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._trace()
        except BaseException as exc:  # handed to the learner's thread, which raises it at its next ``wait``
            self._error = exc

    def wait(self) -> None:
        """Waits for a warm-up still running, then raises its error, if any (once)."""
        thread, self.thread = self.thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

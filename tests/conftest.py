"""Settings shared by every test folder: the Hypothesis profiles, a probe-conversion cache of
the test run's own (``trainer.probe_cache``), so tests neither read nor fill the user's ``~/.cache``,
and the pytest-xdist scheduling (the learning runs together in one worker, every other file in one).

``ci``, the default, is derandomized and keeps no example database: every run draws the same
examples, so CI is reproducible and a failure reruns exactly as it failed. ``dev`` draws fresh
examples on each run and remembers failing ones, for exploring locally:
``HYPOTHESIS_PROFILE=dev .venv/bin/pytest tests/unit/test_fuzz_decode.py``. Each test still sets
its own ``max_examples``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from tests.ports import PortReservation

LEARNING_GROUP = "learning"
"""The scheduling group of the learning runs: under ``pytest -n N --dist loadgroup`` they all run in one worker, one
at a time, as they were measured (they act asynchronously: two at once would share the CPUs)."""
LEARNING_FILES = frozenset(
    {
        "tests/integration/test_stack.py",
        "tests/integration/test_secure_stack.py",
        "tests/integration/test_stack_nats.py",
        # Process stacks with liveness bounds and placement checks: beside another worker they failed under -n 2
        # at load 8-10 (a 90 s bound passed; ping timeouts moved every client to one processor), and passed alone.
        "tests/integration/test_faults.py",
        "tests/integration/test_processor_fleet.py",
        # Asserts another session's step wait during a big flush (< max(0.5 s, flush / 4)): beside another worker
        # it saw 0.66 s during a 1.99 s flush in one of two full -n 2 runs (2026-12-02, load ~2).
        "tests/integration/test_agent_state.py",
    }
)
"""Files outside ``tests/learning/`` whose tests join ``LEARNING_GROUP`` (every ``learning`` test's file is one:
``tests/unit/test_suite_isolation.py`` checks it)."""


def _cache_dir() -> str:
    """One folder per test run: pytest-xdist's workers of one run share it (``store_probes`` writes atomically),
    so a network converted in one worker is a cache hit in the other."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return tempfile.mkdtemp(prefix="stepstream-test-cache-")
    folder = os.path.join(tempfile.gettempdir(), f"stepstream-test-cache-{run}")
    os.makedirs(folder, exist_ok=True)
    return folder


# Before any test imports the exporter; subprocesses (the CLI tests) inherit it.
os.environ.setdefault("STEPSTREAM_CACHE_DIR", _cache_dir())

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def ports() -> Iterator[PortReservation]:
    """Loopback ports held for the test (``ports.port()``, ``tests.ports``), released at teardown."""
    with PortReservation() as reservation:
        yield reservation


def worker_group(nodeid: str) -> str:
    """The scheduling group of a test: ``LEARNING_GROUP`` for ``tests/learning/`` and ``LEARNING_FILES``, else its
    file, so a file's module-scoped fixtures (a training run, a batch of CLI commands) run once, in one worker."""
    path = nodeid.split("::")[0]
    return LEARNING_GROUP if path.startswith("tests/learning/") or path in LEARNING_FILES else path


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` by ``worker_group``. pytest-xdist's own loadgroup reads ``xdist_group`` marks into node ids
    through ``Item._nodeid``, which pytest 9 no longer reads: measured, it split one group's tests across workers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return GroupScheduling(config, log)

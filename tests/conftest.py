"""Settings shared by every test folder: the Hypothesis profiles, a probe-conversion cache of
the test run's own (``trainer.probe_cache``), so tests neither read nor fill the user's ``~/.cache``,
and the pytest-xdist groups (the learning runs together, every other file in one worker).

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

import pytest
from hypothesis import settings

from tests.ports import PortReservation

LEARNING_GROUP = "learning"
"""The ``xdist_group`` of every ``learning`` test: under ``pytest -n N --dist loadgroup`` they all run in one
worker, one at a time, as they were measured (they act asynchronously: two at once would share the CPUs)."""


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


SERIAL_FILES = frozenset({"tests/integration/test_faults.py", "tests/integration/test_processor_fleet.py"})
"""Process stacks with liveness bounds and placement checks that join ``LEARNING_GROUP``: beside another worker
they failed under ``-n 2`` at load 8-10 (a 90 s bound passed; ping timeouts moved every client to one processor),
and passed alone."""


def group_for_workers(items: list[pytest.Item]) -> None:
    """Give every test its ``xdist_group`` (a no-op without ``--dist loadgroup``): ``LEARNING_GROUP`` for the
    ``learning`` tests and ``SERIAL_FILES``, else its file's path, so a file's module-scoped fixtures (a training
    run, a batch of CLI commands) run once, in the one worker that runs the file, not once in each."""
    for item in items:
        path = item.nodeid.split("::")[0]
        serial = path in SERIAL_FILES or item.get_closest_marker("learning") is not None
        item.add_marker(pytest.mark.xdist_group(LEARNING_GROUP if serial else path))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    group_for_workers(items)

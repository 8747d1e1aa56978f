"""Settings shared by every test folder: the Hypothesis profiles, and a probe-conversion cache of
the test run's own (``trainer.probe_cache``), so tests neither read nor fill the user's ``~/.cache``.

``ci``, the default, is derandomized and keeps no example database: every run draws the same
examples, so CI is reproducible and a failure reruns exactly as it failed. ``dev`` draws fresh
examples on each run and remembers failing ones, for exploring locally:
``HYPOTHESIS_PROFILE=dev .venv/bin/pytest tests/unit/test_fuzz_decode.py``. Each test still sets
its own ``max_examples``.
"""

from __future__ import annotations

import os
import tempfile

from hypothesis import settings

# Before any test imports the exporter; subprocesses (the CLI tests) inherit it.
os.environ.setdefault("STEPSTREAM_CACHE_DIR", tempfile.mkdtemp(prefix="stepstream-test-cache-"))

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

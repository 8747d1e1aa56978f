"""Shared fixtures: a real ``ProcessorServer`` on loopback port 0, in the test's own event loop.

Use ``processor`` for a server with default settings, or ``start_processor(settings)`` for your
own (as many as a test needs). Either yields ``(server, address)`` with ``address`` =
``"127.0.0.1:<port>"``; every server is stopped (drained, topics closed) when the test ends, even
when it fails. ``simple_ppo_run``: one short training run for the whole session, for the CLI tests
that only read (or copy) a run.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from processor.behaviors import ProcessorSettings
from processor.server import ProcessorServer, ServerOptions

logger = logging.getLogger(__name__)

STOP_GRACE_S = 1.0
"""Grace of the teardown stop: streams a test left open are cancelled after it."""

RunningProcessor = tuple[ProcessorServer, str]
StartProcessor = Callable[[ProcessorSettings | None], Awaitable[RunningProcessor]]


@pytest.fixture
async def start_processor() -> AsyncIterator[StartProcessor]:
    """A factory ``await start_processor(settings) -> (server, address)``; stops every server it started."""
    servers: list[ProcessorServer] = []

    async def start(settings: ProcessorSettings | None = None) -> RunningProcessor:
        server = ProcessorServer(settings, ServerOptions(host="127.0.0.1", port=0))
        servers.append(server)
        port = await server.start()
        return server, f"127.0.0.1:{port}"

    try:
        yield start
    finally:
        for server in reversed(servers):
            try:
                await server.stop(STOP_GRACE_S)
            except Exception:  # stop the others anyway; the test's own failure matters more
                logger.exception("stopping the processor on port %s failed", server.port)


@pytest.fixture
def processor_settings() -> ProcessorSettings:
    """The settings of ``processor``; override this fixture in a module (or parametrize it indirectly)."""
    return ProcessorSettings()


@pytest.fixture
async def processor(start_processor: StartProcessor, processor_settings: ProcessorSettings) -> RunningProcessor:
    """A running processor with ``processor_settings``: ``(server, "127.0.0.1:<port>")``."""
    return await start_processor(processor_settings)


@pytest.fixture(scope="session")
def simple_ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of one short PPO run of the 1-D task (``tests.integration.simple_run``), trained once per session.

    Tests share it, so it is read only: a test that changes it works on a copy (``shutil.copytree``).
    """
    from tests.integration.simple_run import train_simple_ppo_run  # the CLI tests' helpers, only where needed

    return train_simple_ppo_run(tmp_path_factory.mktemp("simple_ppo"))

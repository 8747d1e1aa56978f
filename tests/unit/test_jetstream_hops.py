"""``common.topics.jetstream.connection._Hops``: coroutines from one loop run on another, results come back.

The connection's ``arun`` (every JetStream publish) goes through it; here two real event loops on
two threads, no broker.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from common.topics.jetstream.connection import _Hops

LIVENESS_S = 10.0


@pytest.fixture
def remote() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(LIVENESS_S)
    loop.close()


def hop(hops: _Hops, coro: object) -> asyncio.Future[object]:
    future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    hops.put(coro, future)  # type: ignore[arg-type]
    return future


def test_results_and_errors_come_back_to_each_caller(remote: asyncio.AbstractEventLoop) -> None:
    hops = _Hops(remote)
    ran_on: set[int] = set()

    async def work(i: int) -> int:
        ran_on.add(threading.get_ident())
        await asyncio.sleep(0.001 * (i % 3))
        if i % 7 == 0:
            raise ValueError(f"item {i}")
        return i * 2

    async def main() -> list[object]:
        return await asyncio.wait_for(
            asyncio.gather(*(hop(hops, work(i)) for i in range(200)), return_exceptions=True), LIVENESS_S
        )

    results = asyncio.run(main())
    assert ran_on and threading.get_ident() not in ran_on  # on the remote loop's thread
    for i, result in enumerate(results):
        if i % 7 == 0:
            assert isinstance(result, ValueError) and str(result) == f"item {i}"
        else:
            assert result == i * 2


def test_a_cancelled_caller_does_not_cancel_the_call(remote: asyncio.AbstractEventLoop) -> None:
    hops = _Hops(remote)
    finished = threading.Event()
    release = asyncio.Event()

    async def work() -> None:
        await release.wait()
        finished.set()

    async def main() -> None:
        waiter = hop(hops, work())
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        remote.call_soon_threadsafe(release.set)
        assert await asyncio.to_thread(finished.wait, LIVENESS_S)
        # the result, arriving after the cancel, is dropped quietly; later calls still work
        assert await asyncio.wait_for(hop(hops, asyncio.sleep(0, "after")), LIVENESS_S) == "after"

    asyncio.run(main())


def test_callers_on_two_loops_each_get_their_own(remote: asyncio.AbstractEventLoop) -> None:
    hops = _Hops(remote)

    async def work(tag: str, i: int) -> str:
        await asyncio.sleep(0)
        return f"{tag}{i}"

    def caller(tag: str, out: dict[str, list[object]]) -> None:
        async def main() -> list[object]:
            return await asyncio.wait_for(asyncio.gather(*(hop(hops, work(tag, i)) for i in range(100))), LIVENESS_S)

        out[tag] = asyncio.run(main())

    out: dict[str, list[object]] = {}
    threads = [threading.Thread(target=caller, args=(tag, out)) for tag in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LIVENESS_S)
    assert out == {tag: [f"{tag}{i}" for i in range(100)] for tag in "ab"}

"""``policies/<behavior>`` as a KV bucket written with compare-and-set, large artifacts in the Object Store."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import struct
from collections.abc import Callable
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.kv import KeyValue

from common.errors import DeadlineExceededError
from common.topics.jetstream.connection import (
    HEADER_ROOM_BYTES,
    RECONNECT_WAIT_S,
    UNREACHABLE,
    JetStreamConnection,
    subject_token,
)
from common.topics.policy import PolicyListener, PolicyTopic, stamped_with_version
from common.topics.registry import policy_topic_name
from protos import pb

logger = logging.getLogger(__name__)

POLICY_POLL_S = 1.0
"""A policy reader also reads the key this often, in case its watch went silent across a restart."""
_POLICY_KEY = "latest"
_INLINE, _IN_OBJECT_STORE = 0, 1
_POLICY_HEADER = struct.Struct(">qB")
"""KV value prefix: the version (int64) and where the artifact is (inline or in the Object Store)."""


class JetStreamPolicyTopic:
    """``policies/<behavior>`` in a KV bucket: a ``PolicySink`` and ``PolicySource`` of ``PolicyUpdate``.

    Made by ``JetStreamTopics.policies``. Readers (``follow=True``) keep the latest version in a
    local ``PolicyTopic`` fed by a watch of the key (module docstring), so ``latest``,
    ``highest_version``, ``wait_newer``, ``await_newer`` and ``add_listener`` never wait on the
    broker. ``publish`` is a compare-and-set on the broker and waits for it.
    """

    def __init__(self, conn: JetStreamConnection, behavior_name: str, *, follow: bool = True) -> None:
        self._conn = conn
        self.behavior_name = behavior_name
        token = subject_token(behavior_name)
        self.bucket = f"policies_{token}"
        self.object_bucket = f"policy_artifacts_{token}"
        self._local: PolicyTopic[pb.PolicyUpdate] = PolicyTopic(policy_topic_name(behavior_name))
        self._follower: concurrent.futures.Future[None] | None = None
        self._wake_follower: asyncio.Event | None = None
        self.published = 0
        """Publishes accepted by the compare-and-set."""
        self.ignored = 0
        """Publishes ignored because the stored version was not below theirs."""
        self._known: tuple[int, int, str | None] | None = None
        """(revision, version, Object Store name) of the value last read or written here."""
        self._kv: KeyValue = conn.run(self._open())
        initial = conn.run(self._read())
        if initial is not None:
            self._local.publish(initial[1], initial[0])
        if follow:
            self._follower = conn.submit(self._follow())
            conn.on_reconnect(self._poke)

    async def _open(self) -> KeyValue:
        js = self._conn.js
        try:
            return await js.key_value(self.bucket)
        except nats.js.errors.BucketNotFoundError:
            config = api.KeyValueConfig(bucket=self.bucket, history=1, storage=api.StorageType.FILE)
            return await js.create_key_value(config)

    @property
    def name(self) -> str:
        return policy_topic_name(self.behavior_name)

    @property
    def closed(self) -> bool:
        return self._local.closed

    # -- the stored value ------------------------------------------------------------------------

    async def _read(self) -> tuple[int, pb.PolicyUpdate] | None:
        entry = await self._entry()
        self._known = self._known_of(entry)
        return await self._decode(entry)

    async def _decode(self, entry: KeyValue.Entry | None) -> tuple[int, pb.PolicyUpdate] | None:
        """(version, PolicyUpdate) of a stored value, its artifact fetched from the Object Store if it is there."""
        if entry is None or not entry.value:
            return None
        version, kind = _POLICY_HEADER.unpack_from(entry.value)
        body = entry.value[_POLICY_HEADER.size :]
        if kind == _IN_OBJECT_STORE:
            store = await self._conn.js.object_store(self.object_bucket)
            result = await store.get(body.decode())
            assert result.data is not None
            body = result.data
        return version, pb.PolicyUpdate.FromString(body)

    @staticmethod
    def _known_of(entry: KeyValue.Entry | None) -> tuple[int, int, str | None]:
        """(revision, version, Object Store name or None) of a stored value; (0, -1, None) for none."""
        if entry is None or not entry.value or entry.revision is None:
            return 0, -1, None
        version, kind = _POLICY_HEADER.unpack_from(entry.value)
        name = entry.value[_POLICY_HEADER.size :].decode() if kind == _IN_OBJECT_STORE else None
        return entry.revision, version, name

    async def _entry(self) -> KeyValue.Entry | None:
        try:
            return await self._kv.get(_POLICY_KEY)
        except nats.js.errors.KeyNotFoundError:
            return None

    @staticmethod
    def _version_of(entry: KeyValue.Entry | None) -> int:
        if entry is None or not entry.value:
            return -1
        return int(_POLICY_HEADER.unpack_from(entry.value)[0])

    # -- PolicySink ------------------------------------------------------------------------------

    @property
    def highest_version(self) -> int:
        """The highest version known here (read at start, then followed), -1 if none."""
        return self._local.highest_version

    def stored_version(self) -> int:
        """The version on the broker now (one request), -1 if none."""
        return self._version_of(self._conn.run(self._entry()))

    def publish(self, item: pb.PolicyUpdate, version: int) -> bool:
        """Store ``item`` as ``version`` if it is above the stored one (compare-and-set).

        Returns:
            True iff it was stored.

        Raises:
            ValueError: ``version`` is negative, or ``item`` is of another behavior.
            StepstreamError: the broker refused or did not answer.
        """
        if version < 0:
            raise ValueError(f"policy topic {self.name!r}: version must be >= 0, got {version}")
        if item.behavior_name and item.behavior_name != self.behavior_name:
            raise ValueError(f"a policy of {item.behavior_name!r} given to the policy topic of {self.behavior_name!r}")
        item = stamped_with_version(item, version)
        try:
            accepted = self._conn.run(self._publish(item.SerializeToString(), version))
        except UNREACHABLE as err:
            raise DeadlineExceededError(f"policy topic {self.name!r}: the broker did not answer: {err!r}") from err
        if accepted:
            self.published += 1
            if self._follower is None or version > self._local.highest_version:
                self._local.publish(item, version)
        else:
            self.ignored += 1
        return accepted

    async def _publish(self, body: bytes, version: int) -> bool:
        header = _POLICY_HEADER.pack(version, _INLINE)
        value = header + body
        object_name: str | None = None
        if len(value) > self._conn.max_payload - HEADER_ROOM_BYTES:
            store = await self._object_store()
            object_name = f"v{version}"
            await store.put(object_name, body)
            value = _POLICY_HEADER.pack(version, _IN_OBJECT_STORE) + object_name.encode()
        known = self._known  # the last value read or written here: no read before a write in the common case
        while True:
            if known is None:
                known = self._known_of(await self._entry())
            revision, stored, replaced_object = known
            if version <= stored:
                logger.warning("policy topic %r: version %d ignored, not above %d", self.name, version, stored)
                if object_name is not None:
                    await self._delete_object(object_name)
                self._known = known
                return False
            try:
                if revision == 0:
                    written = await self._kv.create(_POLICY_KEY, value)
                else:
                    written = await self._kv.update(_POLICY_KEY, value, last=revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                known = None  # another trainer wrote in between: read again
                continue
            self._known = (written, version, object_name)
            if replaced_object is not None:
                await self._delete_object(replaced_object)
            return True

    async def _object_store(self) -> Any:
        js = self._conn.js
        try:
            return await js.object_store(self.object_bucket)
        except nats.js.errors.BucketNotFoundError:
            return await js.create_object_store(self.object_bucket, config=api.ObjectStoreConfig(storage=api.StorageType.FILE))

    async def _delete_object(self, object_name: str) -> None:
        try:
            store = await self._object_store()
            await store.delete(object_name)
        except nats.errors.Error:
            logger.debug("policy topic %r: deleting artifact %r failed", self.name, object_name, exc_info=True)

    # -- following -------------------------------------------------------------------------------

    async def _poke(self) -> None:
        if self._wake_follower is not None:
            self._wake_follower.set()

    async def _follow(self) -> None:
        """Watch the key, and poll the bucket's last revision; publish every newer version into the local topic."""
        self._wake_follower = asyncio.Event()
        watcher = None
        seen_revision = 0
        while not self._local.closed:
            try:
                if watcher is None:
                    watcher = await self._kv.watch(_POLICY_KEY)
                try:
                    entry = await watcher.updates(timeout=POLICY_POLL_S)
                except nats.errors.TimeoutError:
                    entry = None
                if entry is None or self._wake_follower.is_set():
                    # The poll, so a watch gone silent across a restart hides nothing: a small request, then
                    # the value only when the bucket moved on.
                    self._wake_follower.clear()
                    info = await self._conn.js.stream_info(f"KV_{self.bucket}")
                    entry = await self._entry() if (info.state.last_seq or 0) > seen_revision else None
                if entry is None or entry.revision is None:
                    continue
                seen_revision = max(seen_revision, entry.revision)
                if self._version_of(entry) > self._local.highest_version:
                    latest = await self._decode(entry)
                    if latest is not None and latest[0] > self._local.highest_version:
                        self._local.publish(latest[1], latest[0])
            except asyncio.CancelledError:
                raise
            except Exception as err:
                logger.debug("policy topic %r: follow failed (%r); again", self.name, err)
                watcher = None
                await asyncio.sleep(RECONNECT_WAIT_S)

    # -- PolicySource ----------------------------------------------------------------------------

    def latest(self) -> tuple[int, pb.PolicyUpdate] | None:
        return self._local.latest()

    def wait_newer(self, than_version: int, timeout_s: float | None = None) -> tuple[int, pb.PolicyUpdate] | None:
        return self._local.wait_newer(than_version, timeout_s)

    async def await_newer(self, than_version: int, timeout_s: float | None = None) -> tuple[int, pb.PolicyUpdate] | None:
        return await self._local.await_newer(than_version, timeout_s)

    def add_listener(
        self, callback: PolicyListener[pb.PolicyUpdate], loop: asyncio.AbstractEventLoop | None = None
    ) -> Callable[[], None]:
        return self._local.add_listener(callback, loop)

    def close(self) -> None:
        """Stop following and wake every waiter (TopicClosedError); the bucket stays. Idempotent."""
        self._local.close()
        if self._follower is not None:
            self._follower.cancel()

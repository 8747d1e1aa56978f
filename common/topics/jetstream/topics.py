"""``JetStreamTopics``: the JetStream topics of every behavior over one connection."""

from __future__ import annotations

import threading
from typing import Any

from common.errors import ConfigError
from common.security import BROKER_PLAINTEXT, BrokerSecurity
from common.topics.jetstream.connection import CONNECT_TIMEOUT_S, HEADER_ROOM_BYTES, JetStreamConnection, subject_token
from common.topics.jetstream.policy_bucket import JetStreamPolicyTopic
from common.topics.jetstream.stream import ACK_WAIT_S, DEFAULT_MAX_BYTES, JetStreamTrajectoryTopic


class JetStreamTopics:
    """Get-or-create the JetStream topics of each behavior, over one connection; a ``TopicRegistry`` stand-in.

    Args:
        url: ``nats://host:port`` of the broker.
        max_bytes: ``max_bytes`` of every trajectory stream this creates.
        ack_wait_s: ``ack_wait`` of every durable consumer this declares.
        follow_policies: whether ``policies()`` follows the bucket (readers: the processor); a
            trainer that only publishes passes False.
        name, token, tls, tls_hostname, connect_timeout_s: as in ``JetStreamConnection``.
    """

    def __init__(
        self,
        url: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ack_wait_s: float = ACK_WAIT_S,
        follow_policies: bool = True,
        name: str = "stepstream",
        token: str | None = None,
        tls: Any = None,
        tls_hostname: str | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.connection = JetStreamConnection(
            url, name=name, token=token, tls=tls, tls_hostname=tls_hostname, connect_timeout_s=connect_timeout_s
        )
        self._max_bytes = max_bytes
        self._ack_wait_s = ack_wait_s
        self._follow_policies = follow_policies
        self._lock = threading.Lock()
        self._trajectories: dict[str, JetStreamTrajectoryTopic] = {}
        self._policies: dict[str, JetStreamPolicyTopic] = {}

    def trajectories(self, behavior_name: str) -> JetStreamTrajectoryTopic:
        """The topic ``trajectories/<behavior_name>`` (its stream is created at first use)."""
        subject_token(behavior_name)
        with self._lock:
            topic = self._trajectories.get(behavior_name)
            if topic is None:
                topic = self._trajectories[behavior_name] = JetStreamTrajectoryTopic(
                    self.connection, behavior_name, self._max_bytes, self._ack_wait_s
                )
            return topic

    def policies(self, behavior_name: str) -> JetStreamPolicyTopic:
        """The topic ``policies/<behavior_name>`` (its bucket is created here if absent; one request)."""
        subject_token(behavior_name)
        with self._lock:
            topic = self._policies.get(behavior_name)
            if topic is None:
                topic = self._policies[behavior_name] = JetStreamPolicyTopic(
                    self.connection, behavior_name, follow=self._follow_policies
                )
            return topic

    def discard(self, behavior_name: str) -> int | None:
        """Forget this process's handles of ``behavior_name``'s topics (its policy follower stops).

        The stream, its consumers and the bucket stay on the broker: other processors may publish
        there, and the trajectories stored wait for their subscribers. A later lookup opens them again.

        Returns:
            0 (nothing is dropped), or None if this process had no topic of the behavior.
        """
        with self._lock:
            trajectories = self._trajectories.pop(behavior_name, None)
            policies = self._policies.pop(behavior_name, None)
        if trajectories is None and policies is None:
            return None
        for topic in (trajectories, policies):
            if topic is not None:
                topic.close()
        return 0

    @property
    def max_payload_bytes(self) -> int:
        """The largest encoded trajectory the broker takes (its ``max_payload`` less room for headers): the
        processor refuses at Hello a behavior whose worst-case trajectory would not fit."""
        return self.connection.max_payload - HEADER_ROOM_BYTES

    def behavior_names(self) -> list[str]:
        with self._lock:
            return sorted(self._trajectories.keys() | self._policies.keys())

    def close(self) -> None:
        """Close every topic and the connection; what the broker stores stays. Idempotent."""
        with self._lock:
            topics: list[JetStreamTrajectoryTopic | JetStreamPolicyTopic] = [
                *self._trajectories.values(),
                *self._policies.values(),
            ]
        for topic in topics:
            topic.close()
        self.connection.close()

    def __enter__(self) -> JetStreamTopics:
        return self

    def __exit__(self, *unused_exc: object) -> None:
        self.close()


def open_topics(
    url: str, *, name: str, follow_policies: bool = True, security: BrokerSecurity = BROKER_PLAINTEXT
) -> JetStreamTopics:
    """The topics on the broker at ``url`` (``--topics nats://host:4222``), connected with ``security``'s TLS and token.

    Raises:
        ConfigError: ``url`` is not a ``nats://`` (or ``tls://``) address, the TLS files do not load, or
            the broker refused the token or the TLS handshake.
        DeadlineExceededError: no broker answered within ``CONNECT_TIMEOUT_S``.
    """
    if not all(part.strip().startswith(("nats://", "tls://")) for part in url.split(",")):
        raise ConfigError(f"--topics {url!r}: expected nats://HOST:PORT (or several, comma-separated)")
    return JetStreamTopics(
        url,
        name=name,
        follow_policies=follow_policies,
        token=security.token,
        tls=security.ssl_context(),
        tls_hostname=security.server_name,
    )

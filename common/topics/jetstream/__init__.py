"""The topics on NATS JetStream: trajectories as a stream with durable pull consumers, policies in a KV bucket.

Many processors on many hosts publish into one broker, and the trainers subscribe there; the
classes plug into the roles of ``common.topics.base`` like the in-process and gRPC transports.
``JetStreamTopics`` stands where a ``TopicRegistry`` stands: ``trajectories(behavior)`` and
``policies(behavior)``.

Trajectories (``trajectories/<behavior>``):

* A stream ``trajectories_<behavior>`` on subject ``trajectories.<behavior>`` (the behavior name
  escaped by ``subject_token``), with file storage and **Interest retention**: a trajectory leaves
  the stream once every declared subscriber has acked it.
* Each declared subscriber is a **durable pull consumer** of that name, so fan-out is per
  subscriber. Whoever declares (the processor at start) creates the stream and the consumers; a
  trainer that subscribes later loses nothing. Subscribing also declares, as in process.
* The stream is bounded by ``max_msgs`` (the queue size) and ``max_bytes``. A queue's capacity is
  the stream's, shared by its subscribers: a trajectory holds its place until the *last* declared
  subscriber acks it. ``block`` is DiscardNew: the broker refuses a publish to a full stream, and
  the publisher retries with backoff until ``timeout_s``, counting the wait in ``blocked_seconds``.
  ``drop_oldest`` is DiscardOld: the broker drops the oldest; each subscriber counts the drops it
  missed as the gaps in the stream sequence it is delivered. A declare whose ``max_size`` or
  ``full_policy`` differs from the stream's updates the stream (the declaring processor owns them).
* Every publish carries ``Nats-Msg-Id`` = the trajectory id, so a publish retried after a lost
  acknowledgement (a broker restart) is stored once (``DUPLICATE_WINDOW_S``).
* A publish whose attempt went unanswered is **in doubt** (the broker may have stored it); the
  next answer settles it (an acknowledgement, or "stream full": the broker checks ``Nats-Msg-Id``
  before the limits, so it refuses only an id it does not hold). One that must give up unsettled
  (past ``timeout_s`` after one more try, its topic closed, or its caller cancelled) raises
  ``PublishInDoubtError`` or ``PublishInDoubtCancelledError``, and the processor counts it in doubt,
  not dropped (``stream._PublishAttempts``).
* ``ack_wait`` (``ACK_WAIT_S``) and ``max_ack_pending`` (the queue size) are set explicitly: a
  subscriber that dies without acking gets its deliveries again after ``ack_wait``; one that
  ``detach``\\ es NAKs them, so they come again at once. Deliveries are fetched when ``get`` asks,
  never ahead, so ``ack_wait`` runs only while the caller holds them; the trainer acks once the
  trajectory is in its update buffer.
* **Payload limit.** A trajectory travels as one message; the broker's ``max_payload`` bounds it.
  The broker should run with ``max_payload: 8MB`` (``RECOMMENDED_MAX_PAYLOAD_BYTES``; NATS's default
  is 1 MB, and one 84x84x3 trajectory at time_horizon 64 is about 1.35 MB). A trajectory larger than
  the connected broker's limit is refused at publish with ``TopicFullError`` naming both sizes,
  before anything is sent, so nothing can wedge the stream. ``JetStreamTopics.max_payload_bytes``
  tells the processor the limit up front: it refuses at Hello, with the numbers, a behavior whose
  longest trajectory (at its time_horizon) would not fit. A stored message that does not decode is
  terminated (never redelivered) and counted as dropped.

Policies (``policies/<behavior>``): a KV bucket ``policies_<behavior>`` with history 1 and one
key, written with compare-and-set on the key's revision: a publish writes only above the stored
version, expecting the revision it last read or wrote (it reads again when another writer moved
it), so versions never go backwards even with racing trainers. An artifact larger than what fits
a KV value goes to the Object Store bucket ``policy_artifacts_<behavior>``, the KV value holds its
name, and the replaced artifact is deleted. Readers follow the key with a watch; every
``POLICY_POLL_S`` (and at once after a reconnect) they also compare the bucket's last revision (one
small request), so a watch gone silent across a restart hides no version.

Connection: one nats client per ``JetStreamTopics``, on a private event loop thread, so the
trainer's thread (``get``) and the processor's loop (``publish``, ``aget``) both reach it.
Reconnects are unbounded (``max_reconnect_attempts=-1``, one try every ``RECONNECT_WAIT_S``); a
ping every ``PING_INTERVAL_S`` with ``MAX_OUTSTANDING_PINGS`` unanswered notices a dead server in
about ``PING_INTERVAL_S * (MAX_OUTSTANDING_PINGS + 1)`` seconds (a killed server on the same host
is noticed at once). Fetches are issued in slices of ``FETCH_SLICE_S``, so a pull lost with a
restarted server is re-issued within a slice (nats.py#504). While the broker is down, publishers
wait and retry like on a full stream, and the wait counts in ``blocked_seconds``: env clients wait
as long as the processor's ``publish_timeout_s`` allows (default: no limit; past it, the trajectory
is counted unpublished, or in doubt). The client buffers up to ``PENDING_BYTES`` while reconnecting. Each call from another
thread or loop crosses to the connection's loop and back (two wake-ups): with few publishes in
flight that hop, not the broker, bounds the throughput (``benchmarks/broker.py``).

Choose it with ``--topics nats://HOST:4222`` on ``stepstream processor`` and ``stepstream trainer``
(``open_topics``, with ``common.security.BrokerSecurity`` for NATS's TLS and token); the trainer
still asks a processor for the BrainParameters. The processor's ``Subscribe`` RPC does not relay the
broker's stream: it refuses (FAILED_PRECONDITION) naming the broker to subscribe at.

Many processors may publish into one stream and follow one bucket; each gives its sessions (and so
its trajectory ids) its own ``--processor-id`` prefix (``processor.sessions``), so ``Nats-Msg-Id``
never merges two processors' trajectories.
"""

from common.topics.jetstream.connection import (
    CONNECT_TIMEOUT_S,
    MAX_OUTSTANDING_PINGS,
    PING_INTERVAL_S,
    RECONNECT_WAIT_S,
    JetStreamConnection,
    subject_token,
)
from common.topics.jetstream.consumer import FETCH_SLICE_S, JetStreamSubscription
from common.topics.jetstream.policy_bucket import POLICY_POLL_S, JetStreamPolicyTopic
from common.topics.jetstream.stream import (
    ACK_WAIT_S,
    DEFAULT_MAX_BYTES,
    DUPLICATE_WINDOW_S,
    RECOMMENDED_MAX_PAYLOAD_BYTES,
    JetStreamTrajectoryTopic,
)
from common.topics.jetstream.topics import JetStreamTopics, open_topics

__all__ = [
    "ACK_WAIT_S",
    "CONNECT_TIMEOUT_S",
    "DEFAULT_MAX_BYTES",
    "DUPLICATE_WINDOW_S",
    "FETCH_SLICE_S",
    "MAX_OUTSTANDING_PINGS",
    "PING_INTERVAL_S",
    "POLICY_POLL_S",
    "RECOMMENDED_MAX_PAYLOAD_BYTES",
    "RECONNECT_WAIT_S",
    "JetStreamConnection",
    "JetStreamPolicyTopic",
    "JetStreamSubscription",
    "JetStreamTopics",
    "JetStreamTrajectoryTopic",
    "open_topics",
    "subject_token",
]

"""Topics between the processor and the trainers: roles (``base``) and the in-process transport.

See ``base`` for the delivery semantics and ``memory`` / ``policy`` for the in-process topics.
"""

from common.topics.base import (
    MAX_POLICY_VERSION,
    TRAINER_SUBSCRIBER,
    Delivery,
    FullPolicy,
    PolicySink,
    PolicySource,
    SubscriptionStats,
    TopicStats,
    TrajectorySink,
    TrajectorySource,
    TrajectorySubscription,
)
from common.topics.dedup import Deduplicator
from common.topics.memory import DEFAULT_MAX_ITEMS, DEFAULT_MAX_SIZE, DEFAULT_RELEASE_AFTER_S, Subscription, TrajectoryTopic
from common.topics.policy import PolicyListener, PolicyTopic
from common.topics.registry import TopicRegistry, policy_topic_name, trajectory_topic_name

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_RELEASE_AFTER_S",
    "MAX_POLICY_VERSION",
    "TRAINER_SUBSCRIBER",
    "Deduplicator",
    "Delivery",
    "FullPolicy",
    "PolicyListener",
    "PolicySink",
    "PolicySource",
    "PolicyTopic",
    "Subscription",
    "SubscriptionStats",
    "TopicRegistry",
    "TopicStats",
    "TrajectorySink",
    "TrajectorySource",
    "TrajectorySubscription",
    "TrajectoryTopic",
    "policy_topic_name",
    "trajectory_topic_name",
]

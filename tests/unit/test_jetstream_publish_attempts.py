"""``_PublishAttempts``: when a JetStream publish is in doubt (the broker may have stored it), and what settles it.

No broker here: ``test_topics_jetstream`` checks against a real one that a full stream acknowledges a
stored id as a duplicate, the rule a refusal's settling rests on.
"""

from __future__ import annotations

from common.topics.jetstream import DUPLICATE_WINDOW_S
from common.topics.jetstream.stream import _PublishAttempts


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_unanswered_attempt_is_in_doubt_until_an_answer_settles_it() -> None:
    attempts = _PublishAttempts(Clock())
    assert attempts.begin() and attempts.in_doubt  # sent: in doubt until answered
    attempts.not_sent()  # the client refused to send this one after all
    assert not attempts.in_doubt
    assert attempts.begin()  # sent, never answered (timed out)
    assert attempts.begin()  # a retry...
    attempts.not_sent()  # ...not sent: the first one's doubt remains
    assert attempts.in_doubt
    assert attempts.begin()
    attempts.refused()  # a full stream: it holds no message of that id, so none of the attempts was stored
    assert not attempts.in_doubt
    assert attempts.begin()
    attempts.stored()
    assert not attempts.in_doubt


def test_a_refusal_settles_nothing_once_the_broker_may_have_forgotten_the_id() -> None:
    clock = Clock()
    attempts = _PublishAttempts(clock)
    assert attempts.begin()  # unanswered: perhaps stored now...
    clock.now = DUPLICATE_WINDOW_S + 1.0
    assert attempts.begin()
    attempts.refused()  # ...and the id forgotten since: "full" no longer says it is not stored
    assert attempts.in_doubt


def test_an_abandoned_publish_starts_no_attempt_and_says_whether_one_was_in_doubt() -> None:
    quiet = _PublishAttempts(Clock())
    assert not quiet.abandon()  # nothing sent: not stored, for sure
    assert not quiet.begin()
    sent = _PublishAttempts(Clock())
    assert sent.begin()
    assert sent.abandon()
    assert not sent.begin()

"""status_details: every status message the servicer ends an RPC with fits the client's metadata limit."""

from __future__ import annotations

import pytest

from processor.servicer import MAX_STATUS_DETAILS_BYTES, status_details


@pytest.mark.parametrize("char", ["a", "é", "😀"], ids=["ascii", "two_bytes", "four_bytes"])
def test_a_long_message_is_cut_within_the_bound_and_says_how_much_is_left(char: str) -> None:
    message = "behavior 'X' was not declared (declared: [" + char * 100_000 + "])"
    total = len(message.encode())
    cut = status_details(message)
    assert len(cut.encode()) <= MAX_STATUS_DETAILS_BYTES
    assert cut.startswith("behavior 'X' was not declared")
    head, _, tail = cut.rpartition("... (")
    assert tail.endswith(" more)")
    assert len(head.encode()) + int(tail.removesuffix(" more)")) == total


def test_a_short_message_is_unchanged() -> None:
    message = "é" * (MAX_STATUS_DETAILS_BYTES // 2)  # exactly the bound in bytes
    assert status_details(message) == message
    assert status_details(message + "é").endswith(" more)")

"""How a peer's or a file's values are rendered into error and log messages: never unbounded.

A message that quotes what it refuses must not cost what the refused value costs: a 1 MiB key, or
a YAML alias graph that expands to billions of nodes, is shown by its first characters and its size.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import Any

MAX_RENDERED_CHARS = 80
"""Longest rendering of one value in a message (a string is cut to this many characters)."""

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, MAX_RENDERED_CHARS, 40
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = 6


def bounded_repr(value: Any, limit: int = MAX_RENDERED_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters, at a cost bounded by ``limit`` (``reprlib``), not by ``value``.

    A longer string shows its first ``limit`` characters, ``...`` and its length; containers show
    their first few items, three levels deep.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value)} chars)"
    return _REPR.repr(value)[: limit * 2]


MAX_RENDERED_ITEMS = 10
"""Most items of a list shown in a message; the rest are counted."""


def bounded_names(names: Sequence[str], limit: int = MAX_RENDERED_ITEMS) -> str:
    """``"a, b, c"``: at most ``limit`` names (each cut as ``bounded_repr`` cuts), then ``"and N more"``; "none" if empty."""
    shown = [name if len(name) <= MAX_RENDERED_CHARS else bounded_repr(name) for name in names[:limit]]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return (", ".join(shown) + more) or "none"

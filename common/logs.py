"""Structured logs: every record carries the client id and the behavior it concerns, as fields.

Where a log line comes from work for one client or one behavior, ``log_context`` sets them in
``contextvars``: per task or thread, so concurrent sessions never mix them up, and the log calls
themselves stay unchanged. ``install_record_factory`` copies them onto each record when it is made,
in the logging task (an ``extra=`` field of the same name wins); the ``text`` format appends
``[client=... behavior=...]``, the ``json`` format writes one object per line with them as keys, plus
any other ``extra=`` fields.

Across the wire: clients send their id and behavior as call metadata (``identity_metadata``); the
processor's ``LogContextInterceptor`` sets the context from it once per RPC, so everything a
session's handler logs carries them, without a log call on the per-step path. They are labels for
logs only, never trusted for anything else: the Hello's client id is what identifies a session.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator, Sequence

CLIENT_ID_METADATA = "x-stepstream-client-id"
BEHAVIOR_METADATA = "x-stepstream-behavior"
LOG_FORMATS = ("text", "json")

client_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("stepstream_client_id", default=None)
behavior_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("stepstream_behavior", default=None)

_CONTEXT_FIELDS = ("client_id", "behavior")
_STANDARD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "context"}
"""LogRecord attributes that are not ``extra=`` fields."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s"


@contextlib.contextmanager
def log_context(*, client_id: str | None = None, behavior: str | None = None) -> Iterator[None]:
    """Within: log records of this task or thread carry ``client_id`` and ``behavior`` (None leaves one as it was)."""
    tokens = []
    if client_id is not None:
        tokens.append((client_id_var, client_id_var.set(client_id)))
    if behavior is not None:
        tokens.append((behavior_var, behavior_var.set(behavior)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def set_log_context(*, client_id: str | None = None, behavior: str | None = None) -> None:
    """Set the context for the rest of the current task (an RPC handler's, say) without a ``with`` block."""
    if client_id is not None:
        client_id_var.set(client_id)
    if behavior is not None:
        behavior_var.set(behavior)


def identity_metadata(client_id: str | None = None, behaviors: Sequence[str] = ()) -> tuple[tuple[str, str], ...]:
    """Call metadata naming the caller for the server's logs (metadata values must be ASCII)."""
    out = []
    if client_id:
        out.append((CLIENT_ID_METADATA, _ascii(client_id)))
    if behaviors:
        out.append((BEHAVIOR_METADATA, _ascii(",".join(behaviors))))
    return tuple(out)


def _ascii(value: str) -> str:
    return value.encode("ascii", errors="backslashreplace").decode("ascii").replace("\n", " ")


_factory_installed = False


def install_record_factory() -> None:
    """Make every ``LogRecord`` carry ``client_id`` and ``behavior`` from ``log_context``; idempotent.

    A record factory, not a handler filter: the context must be read in the task that logs, which a
    handler in another thread (or pytest's capture) would not be.
    """
    global _factory_installed
    if _factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)  # type: ignore[arg-type]
        record.client_id = client_id_var.get()
        record.behavior = behavior_var.get()
        return record

    logging.setLogRecordFactory(factory)
    _factory_installed = True


class ContextFilter(logging.Filter):
    """Adds ``context`` (`` [client=... behavior=...]`` or empty) for the text format, and the context fields if missing."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "client_id", None) is None:
            record.client_id = client_id_var.get()
        if getattr(record, "behavior", None) is None:
            record.behavior = behavior_var.get()
        parts = [f"{name.split('_')[0]}={value}" for name in _CONTEXT_FIELDS if (value := getattr(record, name)) is not None]
        record.context = f" [{' '.join(parts)}]" if parts else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the context, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_FIELDS and value is not None:
                entry[key] = value if isinstance(value, (str, int, float, bool)) else repr(value)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        import datetime

        return datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(timespec="milliseconds")


def configure_logging(level: str = "INFO", log_format: str = "text", handler: logging.Handler | None = None) -> None:
    """Configure the root logger for a ``stepstream`` process: one stderr handler with ``ContextFilter``.

    ``handler``: the handler of a text console that formats its lines itself (the CLI's rich handler on a
    terminal, which draws the log lines and the live progress bar through one console); None writes
    ``TEXT_FORMAT`` or JSON lines to stderr.

    Raises:
        ValueError: ``log_format`` is not one of ``LOG_FORMATS``.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {LOG_FORMATS}, got {log_format!r}")
    install_record_factory()
    if handler is None or log_format == "json":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(ContextFilter())
    # Not force=True: a host that configured logging first (pytest's capture, an embedding app) keeps its handlers.
    logging.basicConfig(level=level.upper(), handlers=[handler])
    if logging.getLevelName(level.upper()) != logging.DEBUG:
        # TensorFlow's checkpointing logs a line per save through absl at INFO ("Sharding callback duration").
        logging.getLogger("absl").setLevel(logging.WARNING)

"""The config errors that name a dotted key, and the range checks that raise them.

Apart from the YAML schema (``common.config_sections`` re-exports them) so that a module an env
client imports (``common.environment_parameters``) can validate its own settings with the same
errors without importing the schema.
"""

from __future__ import annotations

from typing import Any

from common.errors import ConfigError, NotSupportedYetError


class ConfigKeyError(ConfigError):
    """A ConfigError about one key; ``key`` is its dotted path ("" for the whole file)."""

    def __init__(self, key: str, detail: str, source: str | None = None) -> None:
        self.key, self.detail, self.source = key, detail, source
        where = ": ".join(part for part in (source, key) if part)
        super().__init__(f"{where}: {detail}" if where else detail)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.key, self.detail, self.source))


class NotSupportedKeyError(NotSupportedYetError):
    """A valid ML-Agents setting stepstream does not implement yet; ``key`` is its dotted path."""

    def __init__(self, key: str, detail: str, source: str | None = None) -> None:
        self.key, self.detail, self.source = key, detail, source
        where = ": ".join(part for part in (source, key) if part)
        super().__init__(f"{where}: {detail}" if where else detail)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.key, self.detail, self.source))


def require(ok: bool, key: str, detail: str) -> None:
    """Raise ``ConfigKeyError(key, detail)`` unless ``ok``."""
    if not ok:
        raise ConfigKeyError(key, detail)


def at_least(value: float, low: float, key: str) -> None:
    require(value >= low, key, f"must be >= {low}, got {value!r}")


def positive(value: float, key: str) -> None:
    require(value > 0, key, f"must be > 0, got {value!r}")

"""Transport security shared by the processor and its clients: TLS credentials and the shared token.

One module builds every credential, so the server (``processor.server``) and the clients (env
sessions, trainer subscriptions and publishers, ``stepstream health``) cannot disagree on them.

* **TLS.** The server holds a certificate chain and its key (PEM). Given a CA for clients it also
  *requires* a client certificate signed by that CA (mutual TLS). A client trusts the CA it is given
  (``tls_ca``; the system roots with only ``tls=True``) and presents its own certificate when it has
  one. ``server_name`` overrides the name checked against the server certificate, for a certificate
  issued to another name than the address dialled (``127.0.0.1`` for a cert of ``processor``).
* **Shared token.** Every call carries ``authorization: Bearer <token>`` metadata; the server's
  ``processor.interceptors.TokenAuthInterceptor`` refuses a call without it, or with another token,
  with UNAUTHENTICATED before any handler runs. Without TLS the token crosses the network in clear
  text: use both beyond loopback.

* **The broker** (``--topics nats://...``): NATS has its own TLS and auth, and ``BrokerSecurity``
  feeds them to nats-py: an ``ssl.SSLContext`` that trusts the broker's CA (and presents a client
  certificate when the broker verifies them), and the broker's ``authorization { token }``. The
  broker's side is nats-server's configuration (``tls { cert_file, key_file }`` and
  ``authorization { token }``), not stepstream's.

Everything here is read once, when a service starts (``from_paths``), so a missing or unreadable
file is a ``ConfigError`` naming its flag, not a handshake failure later.
"""

from __future__ import annotations

import hmac
import ssl
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from common.errors import ConfigError

AUTHORIZATION_METADATA = "authorization"
"""The metadata key of the token (gRPC metadata keys are lower case)."""
BEARER_PREFIX = "Bearer "
_TOKEN_CHARACTERS = frozenset(string.ascii_letters + string.digits + string.punctuation)
"""A token travels as a metadata value: printable ASCII without spaces."""

ChannelOptions = Sequence[tuple[str, int | str]]


def _read(path: Path | str | None, flag: str) -> bytes | None:
    """The bytes of ``path`` (None for None).

    Raises:
        ConfigError: the file cannot be read; the message names ``flag``.
    """
    if path is None or path == "":
        return None
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(f"{flag} {path}: cannot read it ({err.strerror or err})") from None


def check_token(token: str | None, what: str = "--token") -> str | None:
    """``token``, stripped of a trailing newline (as files written by ``echo`` end); None for None or empty.

    Raises:
        ConfigError: it holds characters a metadata value cannot carry (spaces, control or non-ASCII).
    """
    if token is None:
        return None
    token = token.rstrip("\r\n")
    if not token:
        return None
    bad = sorted({c for c in token if c not in _TOKEN_CHARACTERS})
    if bad:
        raise ConfigError(f"{what}: the token may hold printable ASCII without spaces only (found {bad!r})")
    return token


def read_token(token: str | None = None, token_file: Path | str | None = None, flag: str = "--token") -> str | None:
    """The shared token from ``token`` or, if that is unset, from the file ``token_file`` (a Docker secret);
    errors name ``flag`` and ``flag-file``.

    Raises:
        ConfigError: the file cannot be read, or the token holds characters metadata cannot carry.
    """
    if token:
        return check_token(token, flag)
    data = _read(token_file, f"{flag}-file")
    return None if data is None else check_token(data.decode("ascii", errors="replace"), f"{flag}-file {token_file}")


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries ``token`` (none without one)."""
    return () if token is None else ((AUTHORIZATION_METADATA, BEARER_PREFIX + token),)


def token_matches(metadata: Sequence[tuple[str, str | bytes]] | None, token: str) -> bool:
    """Whether ``metadata`` carries ``authorization: Bearer <token>``; compared in constant time."""
    expected = (BEARER_PREFIX + token).encode()
    for key, value in metadata or ():
        if key == AUTHORIZATION_METADATA:
            given = value if isinstance(value, bytes) else value.encode("utf-8", errors="replace")
            if hmac.compare_digest(given, expected):
                return True
    return False


@dataclass(frozen=True)
class ServerSecurity:
    """How the processor secures its port: TLS (optionally mutual) and a shared token, each optional.

    Attributes:
        certificate_chain: PEM of the server certificate (and intermediates); None serves plaintext.
        private_key: PEM of its key; given exactly when ``certificate_chain`` is.
        client_ca: PEM of the CA that signs client certificates; given, every client must present one.
        token: the shared token every call must carry (health checks excepted); None checks none.
    """

    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    client_ca: bytes | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ConfigError("--tls-cert and --tls-key: give both (the server certificate and its key) or neither")
        if self.client_ca is not None and self.certificate_chain is None:
            raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key: client certificates are checked only over TLS")
        object.__setattr__(self, "token", check_token(self.token))

    @classmethod
    def from_paths(
        cls,
        cert: Path | str | None = None,
        key: Path | str | None = None,
        client_ca: Path | str | None = None,
        token: str | None = None,
        token_file: Path | str | None = None,
    ) -> ServerSecurity:
        """Read the PEM files and the token (``--tls-cert``, ``--tls-key``, ``--tls-client-ca``, ``--token[-file]``).

        Raises:
            ConfigError: a file cannot be read, or the combination is incomplete.
        """
        return cls(
            _read(cert, "--tls-cert"),
            _read(key, "--tls-key"),
            _read(client_ca, "--tls-client-ca"),
            read_token(token, token_file),
        )

    @property
    def tls(self) -> bool:
        return self.certificate_chain is not None

    @property
    def mutual_tls(self) -> bool:
        return self.client_ca is not None

    def credentials(self) -> grpc.ServerCredentials | None:
        """The server credentials for ``add_secure_port``; None when serving plaintext."""
        if self.certificate_chain is None or self.private_key is None:
            return None
        return grpc.ssl_server_credentials(
            [(self.private_key, self.certificate_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )

    def describe(self) -> str:
        """One phrase for the start log line (never the secrets)."""
        transport = "mutual TLS" if self.mutual_tls else "TLS" if self.tls else "plaintext"
        return f"{transport}, {'token required' if self.token else 'no token'}"


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches the processor: TLS (optionally with its own certificate) and the shared token.

    Attributes:
        tls: use TLS; implied by any of the certificate fields. With no ``root_certificates`` the
            system's trusted roots verify the server.
        root_certificates: PEM of the CA that signed the server certificate.
        certificate_chain: PEM of this client's certificate, for a server that requires one (mTLS).
        private_key: PEM of its key; given exactly when ``certificate_chain`` is.
        server_name: the name to check the server certificate against instead of the address's host.
        token: sent as ``authorization: Bearer <token>`` on every call.
    """

    tls: bool = False
    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ConfigError("--tls-cert and --tls-key: give both (the client certificate and its key) or neither")
        if not self.tls and (self.root_certificates or self.certificate_chain or self.server_name):
            object.__setattr__(self, "tls", True)
        object.__setattr__(self, "token", check_token(self.token))

    @classmethod
    def from_paths(
        cls,
        ca: Path | str | None = None,
        cert: Path | str | None = None,
        key: Path | str | None = None,
        *,
        tls: bool = False,
        server_name: str | None = None,
        token: str | None = None,
        token_file: Path | str | None = None,
    ) -> ClientSecurity:
        """Read the PEM files and the token (``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--token[-file]``).

        Raises:
            ConfigError: a file cannot be read, or the combination is incomplete.
        """
        return cls(
            tls,
            _read(ca, "--tls-ca"),
            _read(cert, "--tls-cert"),
            _read(key, "--tls-key"),
            server_name or None,
            read_token(token, token_file),
        )

    def credentials(self) -> grpc.ChannelCredentials | None:
        """The channel credentials; None for a plaintext channel."""
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates, private_key=self.private_key, certificate_chain=self.certificate_chain
        )

    def channel_options(self, options: ChannelOptions = ()) -> list[tuple[str, int | str]]:
        """``options`` plus the server-name override, if any."""
        extra: list[tuple[str, int | str]] = []
        if self.tls and self.server_name:
            extra.append(("grpc.ssl_target_name_override", self.server_name))
        return [*options, *extra]

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The metadata every call carries (the token's)."""
        return token_metadata(self.token)

    def channel(self, target: str, options: ChannelOptions = ()) -> grpc.Channel:
        """A synchronous channel to ``host:port`` with these credentials."""
        credentials = self.credentials()
        all_options = self.channel_options(options)
        if credentials is None:
            return grpc.insecure_channel(target, options=all_options)
        return grpc.secure_channel(target, credentials, options=all_options)

    def aio_channel(self, target: str, options: ChannelOptions = ()) -> grpc.aio.Channel:
        """An asyncio channel to ``host:port`` with these credentials."""
        credentials = self.credentials()
        all_options = self.channel_options(options)
        if credentials is None:
            return grpc.aio.insecure_channel(target, options=all_options)
        return grpc.aio.secure_channel(target, credentials, options=all_options)


@dataclass(frozen=True)
class BrokerSecurity:
    """How a service reaches the NATS broker: NATS's own TLS (optionally with a client certificate) and token.

    Attributes:
        tls: use TLS; implied by ``ca`` or ``cert``. With no ``ca`` the system's roots verify the broker.
        ca: PEM of the CA that signed the broker's certificate.
        cert: path of this client's certificate chain (PEM), for a broker that verifies clients; the
            file is read when the context is made, as ``ssl`` reads only files.
        key: path of its key; given exactly when ``cert`` is.
        server_name: the name to check the broker's certificate against instead of the URL's host.
        token: the broker's ``authorization { token }``.
    """

    tls: bool = False
    ca: bytes | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ConfigError(
                "--topics-tls-cert and --topics-tls-key: give both (the client certificate and its key) or neither"
            )
        if not self.tls and (self.ca or self.cert or self.server_name):
            object.__setattr__(self, "tls", True)
        object.__setattr__(self, "token", check_token(self.token, "--topics-token"))

    @classmethod
    def from_paths(
        cls,
        ca: Path | str | None = None,
        cert: Path | str | None = None,
        key: Path | str | None = None,
        *,
        tls: bool = False,
        server_name: str | None = None,
        token: str | None = None,
        token_file: Path | str | None = None,
    ) -> BrokerSecurity:
        """Read the CA and the token, and check the certificate files (``--topics-tls-*``, ``--topics-token[-file]``).

        Raises:
            ConfigError: a file cannot be read, or the combination is incomplete.
        """
        _read(cert, "--topics-tls-cert")
        _read(key, "--topics-tls-key")
        return cls(
            tls,
            _read(ca, "--topics-tls-ca"),
            str(cert) if cert else None,
            str(key) if key else None,
            server_name or None,
            read_token(token, token_file, "--topics-token"),
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client context nats-py's ``tls=`` takes; None for a plaintext broker.

        Raises:
            ConfigError: the CA, certificate or key does not load (names the flag).
        """
        if not self.tls:
            return None
        try:
            context = ssl.create_default_context(cadata=None if self.ca is None else self.ca.decode("ascii"))
        except (ssl.SSLError, ValueError) as err:
            raise ConfigError(f"--topics-tls-ca: not a PEM CA certificate ({err})") from None
        if self.cert is not None:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (ssl.SSLError, OSError) as err:
                raise ConfigError(f"--topics-tls-cert {self.cert} / --topics-tls-key {self.key}: {err}") from None
        return context

    def describe(self) -> str:
        """One phrase for a log line (never the secrets)."""
        transport = "TLS with a client certificate" if self.cert else "TLS" if self.tls else "plaintext"
        return f"{transport}, {'token' if self.token else 'no token'}"


BROKER_PLAINTEXT = BrokerSecurity()
"""No TLS, no token towards the broker: the default."""

PLAINTEXT = ClientSecurity()
"""No TLS, no token: the default of every client, as of every server."""

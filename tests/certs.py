"""Test certificates, made at test time with ``cryptography`` (never committed): a CA, a server
certificate for ``localhost`` / ``127.0.0.1``, a client certificate, and an unrelated CA's client
certificate. EC P-256 keys: generated in milliseconds.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=1)


@dataclass(frozen=True)
class CertFiles:
    """PEM files in one folder: ``ca``, ``server_cert``/``server_key``, ``client_cert``/``client_key``,
    and ``rogue_cert``/``rogue_key`` (a client certificate signed by another CA)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _builder(subject: str, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
    )


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (
        _builder(common_name, _name(common_name), key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )  # digital_signature, key_cert_sign, crl_sign
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common_name: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], *, server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _builder(common_name, ca[0].subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if server:
        names = [x509.DNSName("localhost"), x509.DNSName("processor"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca[1], hashes.SHA256()), key


def _write(
    folder: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None
) -> tuple[Path, Path]:
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        key_path.write_bytes(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
        key_path.chmod(0o600)
    return cert_path, key_path


def make_certs(folder: Path) -> CertFiles:
    """Write a fresh CA, server, client and rogue-client certificate set into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca("stepstream test CA")
    rogue_ca = _ca("some other CA")
    ca_path, _ = _write(folder, "ca", ca[0])
    server_cert, server_key = _write(folder, "server", *_leaf("processor", ca, server=True))
    client_cert, client_key = _write(folder, "client", *_leaf("trainer", ca, server=False))
    rogue_cert, rogue_key = _write(folder, "rogue", *_leaf("rogue", rogue_ca, server=False))
    return CertFiles(ca_path, server_cert, server_key, client_cert, client_key, rogue_cert, rogue_key)

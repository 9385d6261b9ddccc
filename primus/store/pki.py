"""The embedded etcd's own certificate authority: who may talk to it is whoever can read a key.

The embedded etcd listens on loopback TCP, which every local account reaches. It therefore
serves TLS only and requires a client certificate signed by a CA made for it alone, and the
keys are files only its user can read (``$PRIMUS_HOME/etcd/pki``, 0700, files 0600).

The set is one CA certificate, a server certificate (for 127.0.0.1 and localhost, also used
between peers, so it serves clients too) and a client certificate, each with its key. The
CA's key signs the two certificates and is then forgotten: nothing can be signed later, and a
set that must change (a file missing or unreadable, a certificate near its end) is replaced
whole. A new set is written in a directory beside the old one and renamed into place, so a
crash never leaves half a set behind.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from primus.private_files import PRIVATE_FILE_MODE, private_dir

if TYPE_CHECKING:
    from cryptography import x509

logger = logging.getLogger(__name__)

VALIDITY = datetime.timedelta(days=3650)
# A set this close to its end is replaced at the next start of etcd; a running etcd keeps the
# certificates it started with.
RENEW_BEFORE = datetime.timedelta(days=30)
_NEW_PREFIX = ".new-"
_OLD_PREFIX = ".old-"


@dataclass(frozen=True)
class EtcdPki:
    """The PEM files of the embedded etcd's certificate set, all in ``directory``."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"


def ensure_pki(directory: Path) -> EtcdPki:
    """The usable certificate set in ``directory``, made first when it is missing or unusable.

    The caller holds the embedded etcd's lock, so no other process writes here meanwhile.
    """
    pki = EtcdPki(directory)
    parent = private_dir(directory.parent)
    for leftover in parent.glob(f"{directory.name}{_NEW_PREFIX}*"):
        shutil.rmtree(leftover)  # a set that a crash left unfinished
    for leftover in parent.glob(f"{directory.name}{_OLD_PREFIX}*"):
        shutil.rmtree(leftover)  # a set replaced before a crash could remove it
    problem = _unusable(pki)
    if problem is None:
        return pki
    if os.path.lexists(directory):
        logger.warning("replacing the embedded etcd's certificates in %s: %s", directory,
                       problem)
    staging = Path(tempfile.mkdtemp(prefix=directory.name + _NEW_PREFIX, dir=parent))
    _write_set(EtcdPki(staging))
    if os.path.lexists(directory):
        retired = Path(tempfile.mkdtemp(prefix=directory.name + _OLD_PREFIX, dir=parent))
        os.rename(directory, retired / directory.name)
        os.rename(staging, directory)
        shutil.rmtree(retired)
    else:
        os.rename(staging, directory)
    _sync_dir(parent)
    logger.info("made a certificate authority and certificates for the embedded etcd in %s",
                directory)
    return pki


def _unusable(pki: EtcdPki) -> str | None:
    """Why the set in ``pki`` cannot serve (a missing file, a bad or ending certificate)."""
    # cryptography is imported only when certificates are checked or made (when the embedded
    # etcd starts): every primus command imports this module, and it costs ~45 ms.
    from cryptography import x509  # noqa: PLC0415
    from cryptography.exceptions import InvalidSignature  # noqa: PLC0415
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    try:
        ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
        pairs = [(x509.load_pem_x509_certificate(cert.read_bytes()),
                  serialization.load_pem_private_key(key.read_bytes(), password=None))
                 for cert, key in ((pki.server_cert, pki.server_key),
                                   (pki.client_cert, pki.client_key))]
    except FileNotFoundError as exc:
        return f"{exc.filename} is missing"
    except (OSError, ValueError, TypeError) as exc:
        return f"a file cannot be read ({exc})"
    now = datetime.datetime.now(datetime.UTC)
    for cert, key in [(ca, None), *pairs]:
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc - RENEW_BEFORE:
            return (f"a certificate is valid from {cert.not_valid_before_utc:%Y-%m-%d} to "
                    f"{cert.not_valid_after_utc:%Y-%m-%d}")
        if key is None:
            continue
        if key.public_key() != cert.public_key():
            return "a key does not belong to its certificate"
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            return "a certificate was not signed by ca.crt"
    return None


def _write_set(pki: EtcdPki) -> None:
    from cryptography import x509  # noqa: PLC0415 - see _unusable
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: PLC0415

    now = datetime.datetime.now(datetime.UTC)
    # Started a little in the past: a clock stepped back since must not void a new set.
    start, end = now - datetime.timedelta(hours=1), now + VALIDITY
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Primus embedded etcd CA")])
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(_key_usage(signs_certificates=True), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    _write_pem(pki.ca_cert, ca.public_bytes(serialization.Encoding.PEM))

    def leaf(name: str, usages: list[x509.ObjectIdentifier],
             names: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(_key_usage(signs_certificates=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       ca_key.public_key()), critical=False))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return (cert.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))

    # etcd's gateway and its peers present the server certificate as a client too.
    server = leaf("primus-etcd", [ExtendedKeyUsageOID.SERVER_AUTH,
                                  ExtendedKeyUsageOID.CLIENT_AUTH],
                  [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                   x509.DNSName("localhost")])
    client = leaf("primus", [ExtendedKeyUsageOID.CLIENT_AUTH], [])
    for (cert_path, key_path), (cert, key) in (
            ((pki.server_cert, pki.server_key), server),
            ((pki.client_cert, pki.client_key), client)):
        _write_pem(key_path, key)
        _write_pem(cert_path, cert)
    _sync_dir(pki.directory)


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    from cryptography import x509  # noqa: PLC0415 - see _unusable

    return x509.KeyUsage(
        digital_signature=not signs_certificates, content_commitment=False,
        key_encipherment=False, data_encipherment=False, key_agreement=False,
        key_cert_sign=signs_certificates, crl_sign=signs_certificates,
        encipher_only=False, decipher_only=False)


def _write_pem(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def _sync_dir(directory: Path) -> None:
    """Make the entries just renamed or written in ``directory`` survive a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

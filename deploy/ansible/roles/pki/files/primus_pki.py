#!/usr/bin/env python3
"""The deployment's credentials, made on the Ansible controller in one run: a CA, the leaf
certificates of the etcd members, the clients and the servers, and the SSH key of Primus's
account; each made once and kept while it matches.

    primus_pki.py DIR [--check] [--ca-cert FILE --ca-key FILE]
        [--member NAME ADDRESS]... [--etcd-server-name NAME] [--client NAME]...
        [--server NAME ADDRESS]... [--ssh-key FILE]

The CA is the operator's (copied in) or one made here. ``etcd-NAME`` serves and is a client
(names: ADDRESS, NAME, 127.0.0.1, localhost and the etcd server name), ``client-NAME`` is a
client, ``server-NAME`` serves (ADDRESS, NAME). A leaf is made again when its file is missing, no
longer matches what is asked (common name, names, usage, issuing CA) or ends within 30 days.
The SSH key (ed25519, OpenSSH format, FILE and FILE.pub) is made once. Prints one JSON line:
{"changed": bool, "made": [...]}. With --check, reports what would change and writes nothing.
Needs only the ``cryptography`` package, which ansible-core itself requires.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 825
RENEW_BEFORE = datetime.timedelta(days=30)
USAGES = {"server": [ExtendedKeyUsageOID.SERVER_AUTH],
          "client": [ExtendedKeyUsageOID.CLIENT_AUTH],
          "both": [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]}


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(path: Path, data: bytes, private: bool) -> None:
    """Write through a temporary file renamed into place; keys are 0600."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _names(sans: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for san in sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            names.append(x509.DNSName(san))
    return names


def _load(path: Path) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return None


def ca(directory: Path, given_cert: str | None, given_key: str | None, check: bool) -> bool:
    """The CA: the operator's (copied in) or one made here once; whether it changed."""
    cert_file, key_file = directory / "ca.crt", directory / "ca.key"
    if given_cert:
        for given in (given_cert, given_key):
            if not given or not Path(given).is_file():
                sys.exit(f"primus_deploy_ca_cert and primus_deploy_ca_key must both name readable files; "
                         f"got {given!r}")
        wanted = Path(given_cert).read_bytes(), Path(given_key).read_bytes()
        current = (cert_file.read_bytes() if cert_file.exists() else b"",
                   key_file.read_bytes() if key_file.exists() else b"")
        if current == wanted:
            return False
        if not check:
            _write(cert_file, wanted[0], private=False)
            _write(key_file, wanted[1], private=True)
        return True
    existing = _load(cert_file)
    if existing is not None and key_file.exists() and \
            existing.not_valid_after_utc - _now() > RENEW_BEFORE:
        return False
    if not check:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Primus deployment CA")])
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(_now() - datetime.timedelta(minutes=5))
                .not_valid_after(_now() + datetime.timedelta(days=CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                             crl_sign=True, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False,
                                             key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        _write(key_file, _key_pem(key), private=True)
        _write(cert_file, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return True


def _matches(cert: x509.Certificate, ca_cert: x509.Certificate, cn: str, sans: list[str],
             usage: str) -> bool:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return (cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == cn
            and set(names) == set(_names(sans)) and list(usages) == USAGES[usage]
            and cert.issuer == ca_cert.subject
            and cert.not_valid_after_utc - _now() > RENEW_BEFORE)


def leaf(directory: Path, name: str, cn: str, sans: list[str], usage: str, check: bool) -> bool:
    """``NAME.crt`` and ``NAME.key`` for ``cn``, signed by the CA of ``directory``; whether they
    changed."""
    cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    ca_cert = _load(directory / "ca.crt")
    if ca_cert is None:  # only in check mode, where the CA is not made
        return True
    existing = _load(cert_file)
    if existing is not None and key_file.exists() and \
            _matches(existing, ca_cert, cn, sans, usage):
        return False
    if not check:
        ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
                .issuer_name(ca_cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(_now() - datetime.timedelta(minutes=5))
                .not_valid_after(_now() + datetime.timedelta(days=LEAF_DAYS))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName(_names(sans)), critical=False)
                .add_extension(x509.ExtendedKeyUsage(USAGES[usage]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        _write(key_file, _key_pem(key), private=True)
        _write(cert_file, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return True


def ssh_key(path: Path, check: bool) -> bool:
    """An ed25519 key pair in OpenSSH's formats (``path``, ``path.pub``), made once; whether it
    was made."""
    if path.exists():
        return False
    if not check:
        key = ed25519.Ed25519PrivateKey.generate()
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH)
        _write(Path(f"{path}.pub"), public + b" primus-deploy\n", private=False)
        _write(path, key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()), private=True)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--ca-cert")
    parser.add_argument("--ca-key")
    parser.add_argument("--member", nargs=2, action="append", default=[],
                        metavar=("NAME", "ADDRESS"))
    parser.add_argument("--etcd-server-name")
    parser.add_argument("--client", action="append", default=[])
    parser.add_argument("--server", nargs=2, action="append", default=[],
                        metavar=("NAME", "ADDRESS"))
    parser.add_argument("--ssh-key", type=Path)
    args = parser.parse_args()
    if bool(args.ca_cert) != bool(args.ca_key):
        sys.exit("--ca-cert and --ca-key: give both (the operator's CA) or neither")
    if not args.check:
        args.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    made = ["ca"] if ca(args.directory, args.ca_cert, args.ca_key, args.check) else []
    # dict.fromkeys: a member whose address is 127.0.0.1 (a site of one host) lists it once.
    leaves = [(f"etcd-{name}", name,
               list(dict.fromkeys([address, name, "127.0.0.1", "localhost",
                                   *([args.etcd_server_name] if args.etcd_server_name else [])])),
               "both")
              for name, address in args.member]
    leaves += [(f"client-{name}", name, [], "client") for name in args.client]
    leaves += [(f"server-{name}", name, [address, name], "server")
               for name, address in args.server]
    made += [name for name, cn, sans, usage in leaves
             if leaf(args.directory, name, cn, sans, usage, args.check)]
    if args.ssh_key is not None and ssh_key(args.ssh_key, args.check):
        made.append(args.ssh_key.name)
    print(json.dumps({"changed": bool(made), "made": made}))


if __name__ == "__main__":
    main()

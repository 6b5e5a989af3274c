"""Certificates of an embedded farm that listens on the network: a private CA made for this
farm alone, and one node certificate it signs for the addresses the farm is reached at.

The CA's key never leaves the driver's process (it is dropped once the node certificate is
signed): clients verify the nodes against the CA's certificate, which travels to the
executors as PEM text in the `tls.ca` option. Made with `cryptography` (the `tls` extra),
not the openssl command, which a runtime may lack.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

VALID_FOR = datetime.timedelta(days=30)


@dataclass(frozen=True)
class FarmCertificates:
    """The files of one farm's TLS: `ca` (PEM, also as `ca_pem`), `cert` and `key`."""
    ca: str
    cert: str
    key: str
    ca_pem: str


def make_farm_certificates(folder: str | Path, names: Iterable[str],
                           farm: str = "farm") -> FarmCertificates:
    """A CA and a node certificate for `names` (IP addresses or DNS names), in `folder`
    (the key file readable by this user only)."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise ImportError("LocalFarm(tls=True) makes its certificates with the "
                          "`cryptography` package: pip install 'garlicfarm[tls]' (or pass "
                          "tls=False on a network you trust)") from None
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"garlicfarm {farm} CA")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + VALID_FOR)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(
                   digital_signature=False, content_commitment=False, key_encipherment=False,
                   data_encipherment=False, key_agreement=False, key_cert_sign=True,
                   crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    node_key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt_names.append(x509.DNSName(name))
    node_cert = (x509.CertificateBuilder()
                 .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                             f"garlicfarm {farm} node")]))
                 .issuer_name(ca_name).public_key(node_key.public_key())
                 .serial_number(x509.random_serial_number())
                 .not_valid_before(now - datetime.timedelta(minutes=5))
                 .not_valid_after(now + VALID_FOR)
                 .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
                 .add_extension(x509.ExtendedKeyUsage([
                     x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
                     x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                 .sign(ca_key, hashes.SHA256()))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    ca_pem = ca_cert.public_bytes(pem).decode("ascii")
    (folder / "ca.pem").write_text(ca_pem, encoding="ascii")
    (folder / "node.pem").write_bytes(node_cert.public_bytes(pem))
    fd = os.open(folder / "node.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(node_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return FarmCertificates(ca=str(folder / "ca.pem"), cert=str(folder / "node.pem"),
                            key=str(folder / "node.key"), ca_pem=ca_pem)

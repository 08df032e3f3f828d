"""TLS material for a SuperLink and key pairs for SuperNode authentication (Flower's own mechanisms).

:func:`make_tls` writes a self-signed CA and a server certificate for the SuperLink
(``--ssl-ca-certfile/--ssl-certfile/--ssl-keyfile``; SuperNodes and the CLI trust ``--root-certificates`` /
``root-certificates``); :func:`make_node_keys` writes ECDSA (NIST P-384) key pairs in OpenSSH format: with
``flower-superlink --enable-supernode-auth`` each public key is registered with ``flwr supernode register`` and
the SuperNode signs its requests with ``--auth-supernode-private-key``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class TLSFiles:
    """A self-signed CA and a SuperLink server certificate signed by it (PEM files)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_tls(directory: Path, hosts: Sequence[str] = ("127.0.0.1", "localhost"), days: int = 30) -> TLSFiles:
    """Write ``ca.crt``, ``server.pem``, ``server.key`` (SANs = ``hosts``) with ``cryptography``, else openssl."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(directory / "ca.crt", directory / "server.pem", directory / "server.key")
    try:
        _make_tls_cryptography(files, hosts, days)
    except ImportError:
        _make_tls_openssl(files, hosts, days)
    return files


def _make_tls_cryptography(files: TLSFiles, hosts: Sequence[str], days: int) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fednsl test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    files.ca_cert.write_bytes(ca.public_bytes(pem))
    files.server_cert.write_bytes(cert.public_bytes(pem))
    files.server_key.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _make_tls_openssl(files: TLSFiles, hosts: Sequence[str], days: int) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("making TLS certificates needs the 'cryptography' package or the openssl command")
    d = files.ca_cert.parent
    san = ",".join(("IP:" if re.fullmatch(r"[\d.:]+", h) else "DNS:") + h for h in hosts)
    ca_key, csr, ext = d / "ca.key", d / "server.csr", d / "server.ext"
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    steps = [
        [openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(ca_key)],
        [
            openssl,
            "req",
            "-x509",
            "-new",
            "-key",
            str(ca_key),
            "-sha256",
            "-days",
            str(days),
            "-subj",
            "/CN=fednsl test CA",
            "-out",
            str(files.ca_cert),
        ],
        [openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(files.server_key)],
        [openssl, "req", "-new", "-key", str(files.server_key), "-subj", f"/CN={hosts[0]}", "-out", str(csr)],
        [
            openssl,
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(files.ca_cert),
            "-CAkey",
            str(ca_key),
            "-CAcreateserial",
            "-days",
            str(days),
            "-sha256",
            "-extfile",
            str(ext),
            "-out",
            str(files.server_cert),
        ],
    ]
    for argv in steps:
        subprocess.run(argv, check=True, capture_output=True, timeout=60)


def make_node_keys(directory: Path, count: int) -> list[tuple[Path, Path]]:
    """``count`` SuperNode key pairs (ECDSA P-384, OpenSSH format): [(private key, public key)]."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        key = ec.generate_private_key(ec.SECP384R1())
        priv, pub = directory / f"supernode-{i}", directory / f"supernode-{i}.pub"
        priv.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
            )
        )
        priv.chmod(0o600)
        pub.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        )
        out.append((priv, pub))
    return out

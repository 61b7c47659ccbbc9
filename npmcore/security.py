"""Mutual TLS for a Dask cluster: a private certificate authority and one certificate per role.

A Dask scheduler runs whatever (pickled) code a client sends it, so a reachable one must
accept only clients that hold a certificate of the cluster's own authority. ``npmcore
dask-certs FOLDER --host HOST …`` writes ``ca.pem`` (the authority; its key is not kept)
and ``{scheduler,worker,client}.pem`` with their keys ``*-key.pem``; every process then
takes its files from Dask's configuration, for example through the environment::

    DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=true
    DASK_DISTRIBUTED__COMM__TLS__CA_FILE=FOLDER/ca.pem
    DASK_DISTRIBUTED__COMM__TLS__SCHEDULER__CERT=FOLDER/scheduler.pem   (…__KEY=FOLDER/scheduler-key.pem)
    DASK_DISTRIBUTED__COMM__TLS__WORKER__CERT=FOLDER/worker.pem         (…__KEY=FOLDER/worker-key.pem)
    DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=FOLDER/client.pem         (…__KEY=FOLDER/client-key.pem)

and the scheduler's address is ``tls://HOST:8786``. :func:`dask_security` gives the same
as a :class:`distributed.security.Security` object for one role.
"""

import datetime
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ROLES = ("scheduler", "worker", "client")
VALID_DAYS = 825


def write_dask_certificates(folder: str | Path, hosts: list[str]) -> Path:
    """A new authority and a certificate (with its key) per role in ``folder``; every certificate
    names ``hosts`` (DNS names or IP addresses) and serves as server and as client. Returns ``folder``."""
    if not hosts:
        raise ValueError("give the hosts (names or IP addresses) the scheduler and workers are reached at")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "npm dask cluster authority")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write(folder / "ca.pem", ca.public_bytes(serialization.Encoding.PEM), private=False)
    names = [_subject_name(h) for h in hosts]
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"npm dask {role}")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        _write(folder / f"{role}.pem", cert.public_bytes(serialization.Encoding.PEM), private=False)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _write(folder / f"{role}-key.pem", pem, private=True)
    return folder


def dask_security(folder: str | Path, role: str):
    """The ``distributed.security.Security`` of ``role`` (scheduler, worker or client) from a folder
    written by :func:`write_dask_certificates`: TLS required, peers checked against the authority."""
    from distributed.security import Security

    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    folder = Path(folder)
    files = {
        f"tls_{role}_cert": str(folder / f"{role}.pem"),
        f"tls_{role}_key": str(folder / f"{role}-key.pem"),
    }
    return Security(tls_ca_file=str(folder / "ca.pem"), require_encryption=True, **files)


def _subject_name(host: str) -> x509.GeneralName:
    import ipaddress

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write(path: Path, data: bytes, private: bool) -> None:
    """Write atomically; keys readable by their owner only."""
    partial = path.with_name(f".tmp-{path.name}")
    partial.write_bytes(data)
    os.chmod(partial, 0o600 if private else 0o644)
    os.replace(partial, path)

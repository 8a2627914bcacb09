"""The run's certificate authority: the emulated hosts trust it, and the cloud APIs' certificates are signed by it.

Made per test run (or bench run), never kept: a certificate for a cloud endpoint's own name (e.g.
kms-vpc.cn-hangzhou.aliyuncs.com), so a host's TLS client checks the name and the chain as it would on a node.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

PEM = serialization.Encoding.PEM


@dataclass(frozen=True)
class Authority:
    cert_pem: str
    key_pem: str

    @classmethod
    def create(cls) -> Authority:
        now = datetime.datetime.now(datetime.timezone.utc)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "goldenenv emulated cloud CA")])
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(cert.public_bytes(PEM).decode(), key.private_bytes(
            PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode())

    def server_pem(self, hostname: str) -> str:
        """A certificate for hostname signed by this CA, followed by its key (PEM): what a TLS server loads."""
        now = datetime.datetime.now(datetime.timezone.utc)
        ca = x509.load_pem_x509_certificate(self.cert_pem.encode())
        ca_key = serialization.load_pem_private_key(self.key_pem.encode(), None)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)]))
                .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        return (cert.public_bytes(PEM) + key.private_bytes(PEM, serialization.PrivateFormat.PKCS8,
                                                            serialization.NoEncryption())).decode()

"""Certificates for the local cluster: CAs, and serving and client certificates signed by them."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


class CertificateAuthority:
    """A CA kept as two PEM files; `issue` writes a leaf certificate and key beside it."""

    def __init__(self, directory: Path, common_name: str = "gangplugin-local-ca") -> None:
        self.directory = directory
        self.cert_path = directory / "ca.crt"
        self.key_path = directory / "ca.key"
        if self.cert_path.exists() and self.key_path.exists():
            key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)
            self._key = key
            self._cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            return
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(self._key, hashes.SHA256())
        )
        _write_key(self.key_path, self._key)
        self.cert_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    @property
    def pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        organization: str | None = None,
        hosts: tuple[str, ...] = (),
        client: bool = False,
    ) -> tuple[Path, Path]:
        """Write `<name>.crt` and `<name>.key`; server certificates get `hosts` as SANs."""
        cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        if cert_path.exists() and key_path.exists():
            return cert_path, key_path
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                critical=False,
            )
        )
        if hosts:
            sans: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    sans.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        _write_key(key_path, key)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert_path, key_path


def service_account_keys(directory: Path) -> tuple[Path, Path]:
    """The RSA key pair the API server signs service-account tokens with."""
    private, public = directory / "sa.key", directory / "sa.pub"
    if not private.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(private, key)
        public.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return private, public

"""A private certificate authority for tests, made with the openssl command: a CA and a server
certificate for 127.0.0.1 it signed, as a corporate index's would be. Nothing trusts the CA
unless a test says so (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, ``REQUESTS_CA_BUNDLE``)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PrivateCA:
    ca_cert: Path  # the CA's certificate (PEM): a bundle for SSL_CERT_FILE / REQUESTS_CA_BUNDLE
    ca_dir: Path  # a folder holding it under its subject hash (<hash>.0): for SSL_CERT_DIR
    server_cert: Path
    server_key: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        return ctx


def _openssl(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run(["openssl", *map(str, args)], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def make_ca(folder: Path) -> PrivateCA:
    """A CA (``envlock test CA``) and a certificate for 127.0.0.1 and localhost signed by it."""
    assert shutil.which("openssl"), "the openssl command is needed to make the test CA"
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=envlock test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=127.0.0.1", cwd=folder)
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                    "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf", cwd=folder)
    digest = _openssl("x509", "-hash", "-noout", "-in", "ca.pem", cwd=folder).strip()
    ca_dir = folder / "certs"
    ca_dir.mkdir(exist_ok=True)
    shutil.copyfile(folder / "ca.pem", ca_dir / f"{digest}.0")
    return PrivateCA(folder / "ca.pem", ca_dir, folder / "server.pem", folder / "server.key")

"""A throwaway certificate authority made with the openssl command: a server certificate for the
fake API server and client certificates, as a cluster's CA would issue them."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, stdin=subprocess.DEVNULL)


def _key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", str(path))


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    root: Path
    ca: Pair

    @classmethod
    def create(cls, root: Path, name: str = "test-ca") -> Authority:
        root.mkdir(parents=True, exist_ok=True)
        ca = Pair(root / f"{name}.crt", root / f"{name}.key")
        _key(ca.key)
        _openssl(
            "req", "-x509", "-new", "-key", str(ca.key), "-subj", f"/CN={name}", "-days", "2", "-out", str(ca.cert)
        )
        return cls(root, ca)

    def issue(self, name: str, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> Pair:
        """A certificate with common name `name` (a client's identity) and these subject alternative
        names."""
        pair = Pair(self.root / f"{name}.crt", self.root / f"{name}.key")
        request = self.root / f"{name}.csr"
        _key(pair.key)
        _openssl("req", "-new", "-key", str(pair.key), "-subj", f"/CN={name}", "-out", str(request))
        names = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
        extensions = self.root / f"{name}.ext"
        extensions.write_text(f"subjectAltName={','.join(names)}\n" if names else "basicConstraints=CA:FALSE\n")
        _openssl(
            "x509", "-req", "-in", str(request), "-CA", str(self.ca.cert), "-CAkey", str(self.ca.key),
            "-CAcreateserial", "-days", "2", "-extfile", str(extensions), "-out", str(pair.cert),
        )  # fmt: skip
        return pair

    def server_context(self, server: Pair, *, client_ca: Path | None = None) -> ssl.SSLContext:
        """A server-side context presenting `server`; with `client_ca`, clients may present a
        certificate it issued (one without a certificate is still served, as kube-apiserver serves
        token users)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(server.cert, server.key)
        if client_ca is not None:
            context.verify_mode = ssl.CERT_OPTIONAL
            context.load_verify_locations(client_ca)
        return context

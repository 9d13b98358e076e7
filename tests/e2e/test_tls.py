"""TLS and mutual TLS with test certificates made by openssl."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from engine.client import EnvdClient, TlsOptions
from tests.conftest import IMAGE
from tests.daemon import DaemonProcess

pytestmark = pytest.mark.anyio


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs() -> Iterator[Path]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make test certificates")
    root = Path(tempfile.mkdtemp(prefix="envd-certs-"))
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=root)
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=root)
        (root / f"{name}.ext").write_text("subjectAltName=DNS:envd.test,IP:127.0.0.1\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                 "-out", f"{name}.pem", cwd=root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _start(certs: Path, data: Path, mutual: bool) -> DaemonProcess:
    args = ["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key")]
    if mutual:
        args += ["--tls-client-ca", str(certs / "ca.pem")]
    key = (certs / "client.key").read_bytes() if mutual else None
    chain = (certs / "client.pem").read_bytes() if mutual else None
    credentials = grpc.ssl_channel_credentials((certs / "ca.pem").read_bytes(), key, chain)
    return DaemonProcess(data, image=IMAGE, extra_args=args).start(
        health_credentials=credentials, server_name="envd.test")


async def test_tls(docker_ready: None, certs: Path, tmp_path: Path) -> None:
    daemon = _start(certs, tmp_path / "data", mutual=False)
    try:
        tls = TlsOptions(ca_cert=certs / "ca.pem", server_name="envd.test")
        async with EnvdClient(daemon.target, daemon.token, tls) as client:
            assert await client.list_sessions() == []
        async with EnvdClient(daemon.target, daemon.token) as plaintext:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await plaintext.list_sessions()
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        daemon.stop()


async def test_mutual_tls(docker_ready: None, certs: Path, tmp_path: Path) -> None:
    daemon = _start(certs, tmp_path / "data", mutual=True)
    try:
        with_cert = TlsOptions(ca_cert=certs / "ca.pem", client_cert=certs / "client.pem",
                               client_key=certs / "client.key", server_name="envd.test")
        async with EnvdClient(daemon.target, daemon.token, with_cert) as client:
            assert await client.list_sessions() == []
        without = TlsOptions(ca_cert=certs / "ca.pem", server_name="envd.test")
        async with EnvdClient(daemon.target, daemon.token, without) as client:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.list_sessions()
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        daemon.stop()

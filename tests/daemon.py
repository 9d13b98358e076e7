"""Run a real ``envd serve`` subprocess on a free port, for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DaemonProcess:
    data_dir: Path
    tokens: dict[str, str] = field(default_factory=lambda: {"token-a": "alice", "token-b": "bob"})
    extra_args: list[str] = field(default_factory=list)
    backend: str = "docker"
    image: str = "envd-sandbox:latest"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return next(iter(self.tokens))

    def start(
        self,
        timeout: float = 30.0,
        health_credentials: grpc.ChannelCredentials | None = None,
        server_name: str | None = None,
    ) -> DaemonProcess:
        from tests.conftest import DATA_DIRS, OWNERS, daemon_owner

        OWNERS.add(daemon_owner(self.data_dir))
        DATA_DIRS.add(str(self.data_dir))
        env = dict(os.environ)
        env["ENVD_TOKENS"] = ",".join(f"{t}:{n}" for t, n in self.tokens.items())
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "envd.cli",
                "serve",
                "--listen",
                self.target,
                "--data-dir",
                str(self.data_dir),
                "--backend",
                self.backend,
                "--image",
                self.image,
                *self.extra_args,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
        )
        log.close()
        self.wait_healthy(timeout, health_credentials, server_name)
        return self

    def wait_healthy(
        self,
        timeout: float,
        credentials: grpc.ChannelCredentials | None = None,
        server_name: str | None = None,
    ) -> None:
        deadline = time.monotonic() + timeout
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"envd exited with {self.proc.returncode}:\n{self.log()}")
            channel = (
                grpc.secure_channel(self.target, credentials, options=options)
                if credentials
                else grpc.insecure_channel(self.target)
            )
            try:
                stub = health_pb2_grpc.HealthStub(channel)
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            finally:
                channel.close()
            time.sleep(0.1)
        raise TimeoutError(f"envd did not become healthy:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)

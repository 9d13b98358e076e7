"""Assemble and run the daemon: backend, session manager, gRPC server with health and
reflection, TLS and authentication."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

import grpc
import prometheus_client
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from envd.backends.base import Backend
from envd.config import DaemonConfig
from envd.metrics import Metrics
from envd.server.auth import TokenAuth
from envd.server.servicer import EnvironmentServicer
from envd.sessions.manager import SessionManager
from envd.sessions.store import SessionStore
from envd.v1 import environment_pb2 as pb
from envd.v1 import environment_pb2_grpc as pb_grpc

log = logging.getLogger("envd")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Environment"].full_name
_MAX_MESSAGE = 64 * 1024 * 1024


def make_backend(config: DaemonConfig) -> Backend:
    if config.backend == "local":
        from envd.backends.local import LocalBackend

        return LocalBackend(config.data_dir)
    from envd.backends.docker import DockerBackend

    # Sandboxes are labelled with the data directory they belong to, so that several daemons
    # on one host never reap each other's containers.
    owner = hashlib.sha256(str(config.data_dir.resolve()).encode()).hexdigest()[:16]
    return DockerBackend(
        config.data_dir, owner, sandbox_uid=config.sandbox_uid, sandbox_gid=config.sandbox_uid,
        gvisor_runtime=config.gvisor_runtime,
    )


def server_credentials(config: DaemonConfig) -> grpc.ServerCredentials | None:
    if config.tls_cert is None and config.tls_key is None:
        return None
    if config.tls_cert is None or config.tls_key is None:
        raise ValueError("TLS needs both --tls-cert and --tls-key")
    root = config.tls_client_ca.read_bytes() if config.tls_client_ca else None
    return grpc.ssl_server_credentials(
        [(config.tls_key.read_bytes(), config.tls_cert.read_bytes())],
        root_certificates=root,
        require_client_auth=root is not None,
    )


@dataclass
class Daemon:
    config: DaemonConfig
    server: grpc.aio.Server
    manager: SessionManager
    health: object
    port: int

    async def stop(self, grace: float = 5.0) -> None:
        """Graceful: no new sessions, running calls end as ``aborted`` and their streams
        complete, then the server stops; the sandboxes stay for the next start."""
        await _set_health(self.health, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.manager.abort_calls(grace)
        await self.server.stop(grace)
        await self.manager.shutdown()


async def _set_health(servicer: object, status: int) -> None:
    for name in ("", SERVICE_NAME):
        result = servicer.set(name, status)  # type: ignore[attr-defined]
        if asyncio.iscoroutine(result):
            await result


async def start_daemon(config: DaemonConfig, env: Mapping[str, str] | None = None) -> Daemon:
    env = os.environ if env is None else env
    config.data_dir.mkdir(parents=True, exist_ok=True)
    config.data_dir.chmod(0o711)
    auth = TokenAuth.load(config.tokens_file, env, config.data_dir, config.insecure)
    backend = make_backend(config)
    metrics = Metrics()
    manager = SessionManager(config, backend, SessionStore(config.data_dir / "state.db"), metrics)
    await manager.start()
    metrics_port = start_metrics_server(config.metrics_listen, metrics)

    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
    )
    pb_grpc.add_EnvironmentServicer_to_server(EnvironmentServicer(manager, auth), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME),
        server,
    )
    credentials = server_credentials(config)
    if credentials is None:
        port = server.add_insecure_port(config.listen)
    else:
        port = server.add_secure_port(config.listen, credentials)
    if port == 0:
        await manager.shutdown()
        raise OSError(f"cannot listen on {config.listen}")
    await server.start()
    await _set_health(health_servicer, health_pb2.HealthCheckResponse.SERVING)
    host = config.listen.rsplit(":", 1)[0]
    log.info("envd listening on %s:%d (backend %s, %s, %s)", host, port, config.backend,
             "TLS" if credentials else "plaintext",
             "no authentication" if config.insecure else "bearer tokens")
    if metrics_port:
        log.info("metrics on http://%s:%d/metrics", config.metrics_listen.rsplit(":", 1)[0],
                 metrics_port)
    return Daemon(config, server, manager, health_servicer, port)


def start_metrics_server(listen: str, metrics: Metrics) -> int:
    """Serve /metrics from a thread; returns the bound port (0: not serving)."""
    if not listen:
        return 0
    host, _, port = listen.rpartition(":")
    server, _thread = prometheus_client.start_http_server(
        int(port), addr=host.strip("[]") or "127.0.0.1", registry=metrics.registry)
    return int(server.server_port)


async def serve(config: DaemonConfig) -> None:
    daemon = await start_daemon(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await daemon.stop()

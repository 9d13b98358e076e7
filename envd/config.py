"""Daemon configuration: every setting, its default, and the environment variable that sets it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_IMAGE = "envd-sandbox:latest"


class DaemonConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    listen: str = Field(default="127.0.0.1:50051", description="gRPC listen address HOST:PORT.")
    data_dir: Path = Field(
        default=Path("/var/lib/envd"), description="Session registry, scratchpads, runner sockets."
    )
    backend: Literal["docker", "local"] = Field(default="docker", description="Sandbox backend.")
    default_image: str = Field(
        default=DEFAULT_IMAGE, description="Image when a session names none."
    )
    memory_bytes: int = Field(default=1 << 30, description="Default memory limit per sandbox.")
    cpus: float = Field(default=1.0, description="Default CPU quota per sandbox.")
    pids: int = Field(default=512, description="Default process limit per sandbox.")
    scratchpad_bytes: int = Field(
        default=256 << 20, description="Default scratchpad quota per session (archived output)."
    )
    max_sessions: int = Field(default=256, description="Sessions the daemon holds at once.")
    idle_ttl_seconds: int = Field(
        default=0, description="Default idle TTL of a session in seconds; 0 keeps sessions."
    )
    warm_pool_size: int = Field(
        default=0, description="Sandboxes of the default shape kept started ahead of time."
    )
    metrics_listen: str = Field(
        default="", description="HOST:PORT for Prometheus /metrics; empty: no metrics server."
    )
    allow_local_vault: bool = Field(
        default=False, description="Let the unisolated local backend receive vault secrets."
    )
    sandbox_uid: int = Field(default=1000, description="User id tool processes run as.")
    gvisor_runtime: str = Field(default="runsc", description="Docker runtime for gVisor.")
    insecure: bool = Field(
        default=False, description="Serve without authentication (local development only)."
    )
    tokens_file: Path | None = Field(
        default=None, description="File of 'TOKEN TENANT' lines; bearer tokens of callers."
    )
    tls_cert: Path | None = Field(default=None, description="Server certificate (PEM).")
    tls_key: Path | None = Field(default=None, description="Server private key (PEM).")
    tls_client_ca: Path | None = Field(
        default=None, description="CA for client certificates: enables mutual TLS."
    )
    max_upload_bytes: int = Field(
        default=1 << 30,
        description="Largest UploadFiles archive, and the most it may unpack to; <= 0: no limit.",
    )
    log_level: str = Field(default="INFO", description="Log level.")

"""The conformance suite runs against every Environment: in process on the local and docker
backends, and remote over gRPC against a real daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from engine.interface import EnvironmentInterface
from envd.environment import SandboxEnvironment
from envd.sessions.model import SessionOptions, ToolOverride

MakeEnv = Callable[..., Awaitable[EnvironmentInterface]]


def gvisor_available() -> bool:
    import subprocess

    out = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"],
                         capture_output=True, text=True).stdout
    return "runsc" in out


@pytest.fixture(params=["local", "docker", "gvisor", "remote"])
async def make_env(request: pytest.FixtureRequest, manager_factory: Any) -> AsyncIterator[MakeEnv]:
    """``await make_env(tools={"exec_command": {"timeout_ms": 1000}})`` -> an Environment."""
    kind = request.param
    made: list[EnvironmentInterface] = []
    if kind != "local":
        request.getfixturevalue("docker_ready")
    if kind == "gvisor" and not gvisor_available():
        pytest.fail("the runsc runtime is not configured (scripts/ensure-docker.sh does it)")
    backend = {"gvisor": "docker"}.get(kind, kind)
    manager = await manager_factory(backend) if kind != "remote" else None
    daemon = request.getfixturevalue("envd_daemon") if kind == "remote" else None

    async def make(tools: dict[str, dict[str, Any]] | None = None) -> EnvironmentInterface:
        env: EnvironmentInterface
        if manager is not None:
            options = SessionOptions(
                tools={k: ToolOverride(**v) for k, v in (tools or {}).items()},
                isolation="gvisor" if kind == "gvisor" else "runc",
            )
            env = SandboxEnvironment(await manager.create(options, tenant=""), manager)
        else:
            from engine.remote import RemoteEnvironment
            from envd.v1 import environment_pb2 as pb

            assert daemon is not None
            env = await RemoteEnvironment.create(
                daemon.target, token=daemon.token,
                tools={k: pb.ToolOverride(**v) for k, v in (tools or {}).items()},
            )
        made.append(env)
        return env

    make.kind = kind  # type: ignore[attr-defined]
    yield make
    for env in made:
        await env.dispose()


@pytest.fixture
async def env(make_env: MakeEnv) -> EnvironmentInterface:
    return await make_env()

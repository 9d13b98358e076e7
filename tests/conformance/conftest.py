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


@pytest.fixture(params=["local", "docker", "remote"])
async def make_env(request: pytest.FixtureRequest, manager_factory: Any) -> AsyncIterator[MakeEnv]:
    """``await make_env(tools={"exec_command": {"timeout_ms": 1000}})`` -> an Environment."""
    kind = request.param
    made: list[EnvironmentInterface] = []
    if kind != "local":
        request.getfixturevalue("docker_ready")
    manager = await manager_factory(kind) if kind != "remote" else None
    daemon = request.getfixturevalue("envd_daemon") if kind == "remote" else None

    async def make(tools: dict[str, dict[str, Any]] | None = None) -> EnvironmentInterface:
        env: EnvironmentInterface
        if manager is not None:
            options = SessionOptions(
                tools={k: ToolOverride(**v) for k, v in (tools or {}).items()}
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

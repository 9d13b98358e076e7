"""The warm pool: a claim instead of a container start, indistinguishable from a fresh one."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest

from envd.environment import SandboxEnvironment
from envd.sessions.model import SessionOptions
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio


async def _wait_ready(manager, count: int) -> None:  # type: ignore[no-untyped-def]
    for _ in range(200):
        if len(manager.pool.ready) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the pool did not fill")


async def test_claim_is_fast_and_fresh(docker_ready: None, manager_factory) -> None:  # type: ignore[no-untyped-def]
    manager = await manager_factory("docker", warm_pool_size=2)
    await _wait_ready(manager, 2)
    started = time.monotonic()
    session = await manager.create(SessionOptions(vault={"KEY": "value-one"}), "")
    claim_time = time.monotonic() - started
    assert claim_time < 0.2
    env = SandboxEnvironment(session, manager)
    result = await call_tool(
        env,
        "exec_command",
        {"cmd": 'ls -A /workspace /scratchpad; test "$KEY" = value-one && echo vault-ok'},
    )
    assert result.output == "/scratchpad:\n\n/workspace:\nvault-ok\n"
    # Another claim gets its own sandbox and vault.
    other = SandboxEnvironment(await manager.create(SessionOptions(), ""), manager)
    assert other.session.handle.sandbox_id != session.handle.sandbox_id
    seen = await call_tool(other, "exec_command", {"cmd": "echo ${KEY:-unset}"})
    assert seen.output == "unset\n"
    await _wait_ready(manager, 2)  # refilled in the background


async def test_other_shapes_start_cold(docker_ready: None, manager_factory) -> None:  # type: ignore[no-untyped-def]
    manager = await manager_factory("docker", warm_pool_size=1)
    await _wait_ready(manager, 1)
    session = await manager.create(SessionOptions(memory_bytes=256 << 20), "")
    assert len(manager.pool.ready) == 1
    assert session.spec.memory_bytes == 256 << 20


def _containers(owner: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=envd.owner={owner}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


@pytest.mark.parametrize("delay", [0.05, 0.15, 0.3])
async def test_shutdown_while_warming_leaves_nothing(
    docker_ready: None, manager_factory, delay: float
) -> None:  # type: ignore[no-untyped-def]
    manager = await manager_factory("docker", warm_pool_size=2)
    owner = manager.backend.owner
    await asyncio.sleep(delay)  # lands inside a container start, at one point or another
    await manager.shutdown()
    assert _containers(owner) == []


@pytest.mark.parametrize("delay", [0.05, 0.15])
async def test_cancelled_create_leaves_nothing(
    docker_ready: None, manager_factory, delay: float
) -> None:  # type: ignore[no-untyped-def]
    manager = await manager_factory("docker")
    creating = asyncio.ensure_future(manager.create(SessionOptions(), ""))
    await asyncio.sleep(delay)
    creating.cancel()
    with pytest.raises(asyncio.CancelledError):
        await creating
    assert _containers(manager.backend.owner) == []
    assert manager.store.all() == [] and manager.sessions == {}

"""Resource faults inside a sandbox: memory, processes, disk, and sandboxes dying under us."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest

from envd.environment import SandboxEnvironment
from envd.sessions.model import SessionOptions, ToolOverride
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio


async def make(manager_factory, **options) -> SandboxEnvironment:  # type: ignore[no-untyped-def]
    manager = await manager_factory("docker")
    return SandboxEnvironment(await manager.create(SessionOptions(**options), ""), manager)


async def test_out_of_memory(docker_ready: None, manager_factory) -> None:  # type: ignore[no-untyped-def]
    env = await make(manager_factory, memory_bytes=128 << 20)
    result = await call_tool(
        env,
        "exec_command",
        {"cmd": "echo start; python3 -c 'b = bytearray(600 * 1024 * 1024)'; echo never"},
    )
    # bash is the leader; python is killed and bash goes on: its own exit shows the kill.
    assert "Killed" in result.output or "out of memory" in result.output
    direct = await call_tool(
        env, "exec_command", {"cmd": "exec python3 -c 'b = bytearray(600 * 1024 * 1024)'"}
    )
    assert direct.stop_reason == "failed"
    assert direct.output == (
        "[terminated by signal SIGKILL: out of memory, the sandbox's memory limit was reached]"
    )
    after = await call_tool(env, "exec_command", {"cmd": "echo alive"})
    assert after.output == "alive\n"


async def test_fork_bomb_is_contained(docker_ready: None, manager_factory) -> None:  # type: ignore[no-untyped-def]
    env = await make(
        manager_factory, pids=64, tools={"exec_command": ToolOverride(timeout_ms=4000)}
    )
    started = time.monotonic()
    result = await call_tool(
        env, "exec_command", {"cmd": "bomb() { bomb | bomb & }; bomb; sleep 2"}
    )
    assert time.monotonic() - started < 15
    assert result.stop_reason in ("completed", "failed")
    for _ in range(50):
        after = await call_tool(env, "exec_command", {"cmd": "ps -e --no-headers | wc -l"})
        if after.stop_reason == "completed" and int(after.output) < 10:
            break
        await asyncio.sleep(0.2)
    assert after.stop_reason == "completed" and int(after.output) < 10, after.output


async def test_huge_output_is_bounded_by_archive_and_quota(
    docker_ready: None, manager_factory
) -> None:  # type: ignore[no-untyped-def]
    env = await make(manager_factory, scratchpad_bytes=64 << 20)
    scratch = env.session.handle.scratchpad.host_dir
    result = await call_tool(env, "exec_command", {"cmd": "head -c 256M /dev/zero | tr '\\0' a"})
    assert result.stop_reason == "completed"
    assert "[output archived (8 MiB limit; head and tail kept): /scratchpad/" in result.output
    used = sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file())
    assert used < 8 << 20
    # Fill the quota: 64 MiB allows 7 more full archives, then the note says why.
    notes = []
    for _ in range(8):
        r = await call_tool(env, "exec_command", {"cmd": "head -c 9M /dev/zero | tr '\\0' b"})
        notes.append(r.output.rsplit("\n", 1)[1])
    assert notes[-1] == "[output archive failed: scratchpad quota of 67108864 bytes reached]"
    used = sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file())
    assert used <= 64 << 20
    assert (await call_tool(env, "exec_command", {"cmd": "echo fine"})).output == "fine\n"


async def test_killed_container_is_reported(docker_ready: None, manager_factory) -> None:  # type: ignore[no-untyped-def]
    env = await make(manager_factory)
    session = env.session
    subprocess.run(["docker", "kill", session.handle.sandbox_id], check=True, capture_output=True)
    for _ in range(100):
        if session.state == "broken":
            break
        await asyncio.sleep(0.05)
    assert session.state == "broken"
    assert "exited" in session.detail
    result = await call_tool(env, "exec_command", {"cmd": "echo hi"})
    assert result.stop_reason == "failed"
    assert result.output.startswith(
        "[tool error] the sandbox is unavailable: the sandbox container exited (code 137)"
    )
    assert await env._manager.close(session.session_id, "")  # type: ignore[union-attr]


async def test_killed_runner_is_reported(docker_ready: None, manager_factory) -> None:  # type: ignore[no-untyped-def]
    env = await make(manager_factory)
    session = env.session
    subprocess.run(
        ["docker", "exec", session.handle.sandbox_id, "pkill", "-9", "-f", "runner.py"],
        check=True,
        capture_output=True,
    )
    for _ in range(100):
        if session.state == "broken":
            break
        await asyncio.sleep(0.05)
    assert session.state == "broken"
    result = await call_tool(env, "exec_command", {"cmd": "echo hi"})
    assert result.stop_reason == "failed" and "the sandbox is unavailable" in result.output
    assert await env._manager.close(session.session_id, "")  # type: ignore[union-attr]

"""dockerd restarts under running sessions (live-restore keeps the sandboxes up)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from envd.environment import SandboxEnvironment
from envd.sessions.model import SessionOptions
from tests.helpers import call_tool

pytestmark = [pytest.mark.anyio, pytest.mark.disruptive]
ROOT = Path(__file__).resolve().parents[2]


def restart_dockerd() -> None:
    subprocess.run(["pkill", "-TERM", "-x", "dockerd"], check=True)
    deadline = time.monotonic() + 60
    while subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "dockerd did not stop"
        time.sleep(0.2)
    subprocess.run([str(ROOT / "scripts" / "ensure-docker.sh")], check=True)


async def test_sessions_survive_a_dockerd_restart(docker_ready: None, manager_factory) -> None:  # type: ignore[no-untyped-def]
    manager = await manager_factory("docker")
    env = SandboxEnvironment(await manager.create(SessionOptions(), ""), manager)
    await call_tool(env, "exec_command", {"cmd": "echo before > /workspace/f"})
    restart_dockerd()
    after = await call_tool(env, "exec_command", {"cmd": "cat /workspace/f"})
    assert after.output == "before\n"
    assert env.session.state == "running"
    other = SandboxEnvironment(await manager.create(SessionOptions(), ""), manager)
    assert (await call_tool(other, "exec_command", {"cmd": "echo new"})).output == "new\n"

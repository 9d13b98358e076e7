"""What sandboxed code can and cannot do inside a docker session."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from envd.environment import SandboxEnvironment
from envd.sessions.model import SessionOptions
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio


async def test_not_root_no_capabilities_no_network(docker_env: SandboxEnvironment) -> None:
    result = await call_tool(
        docker_env,
        "exec_command",
        {
            "cmd": "id -u; grep -E '^Cap(Eff|Prm|Amb)' /proc/self/status; "
            "grep NoNewPrivs /proc/self/status; ls /sys/class/net"
        },
    )
    lines = result.output.splitlines()
    assert lines[0] == "1000"
    assert lines[1:4] == [
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapAmb:\t0000000000000000",
    ]
    assert lines[4] == "NoNewPrivs:\t1"
    assert lines[5:] == ["lo"]
    net = await call_tool(
        docker_env,
        "exec_command",
        {"cmd": "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)'"},
    )
    assert net.stop_reason == "failed" and "Network is unreachable" in net.output


async def test_runner_is_out_of_reach(docker_env: SandboxEnvironment) -> None:
    result = await call_tool(
        docker_env,
        "exec_command",
        {
            "cmd": "ls /run/envd 2>&1; kill -0 $(pgrep -f envd-runner/runner.py | head -1) 2>&1;"
            " cat /proc/$(pgrep -f runner.py | head -1)/environ 2>&1 | head -c 100; true"
        },
    )
    assert "Permission denied" in result.output
    assert "Operation not permitted" in result.output


async def test_limits_are_set(docker_env: SandboxEnvironment) -> None:
    container = docker_env.session.handle.sandbox_id
    inspect = subprocess.run(
        [
            "docker",
            "inspect",
            "-f",
            "{{.HostConfig.Memory}} {{.HostConfig.MemorySwap}} {{.HostConfig.PidsLimit}} "
            "{{.HostConfig.NanoCpus}} {{.HostConfig.NetworkMode}} {{.HostConfig.CapDrop}} "
            "{{.HostConfig.SecurityOpt}}",
            container,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split(" ", 6)
    assert inspect[0] == inspect[1] == str(1 << 30)
    assert inspect[2] == "512" and inspect[3] == str(10**9) and inspect[4] == "none"
    assert "ALL" in inspect[5] and "no-new-privileges" in inspect[6]


async def test_sessions_do_not_see_each_other(docker_ready: None, manager_factory) -> None:  # type: ignore[no-untyped-def]
    manager = await manager_factory("docker")
    first = SandboxEnvironment(await manager.create(SessionOptions(), ""), manager)
    second = SandboxEnvironment(await manager.create(SessionOptions(), ""), manager)
    await call_tool(
        first, "exec_command", {"cmd": "echo secret > /workspace/mine; (sleep 77.7 &); true"}
    )
    await call_tool(first, "exec_command", {"cmd": "sleep 60.606", "run_in_background": True})
    seen = await call_tool(
        second,
        "exec_command",
        {"cmd": "ls -A /workspace; pgrep -f 'sleep 60[.]606' || echo no-process"},
    )
    assert seen.output == "no-process\n"


async def test_close_is_idempotent_and_removes_everything(
    docker_ready: None, manager_factory
) -> None:  # type: ignore[no-untyped-def]
    manager = await manager_factory("docker")
    session = await manager.create(SessionOptions(), "")
    env = SandboxEnvironment(session, manager)
    await call_tool(env, "exec_command", {"cmd": "echo x > /workspace/f"})
    container = session.handle.sandbox_id
    assert await manager.close(session.session_id, "") is True
    assert await manager.close(session.session_id, "") is False
    await env.dispose()
    gone = subprocess.run(["docker", "inspect", container], capture_output=True)
    assert gone.returncode != 0
    volumes = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", f"name=envd-ws-{session.session_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert volumes.strip() == ""
    assert not session.handle.host_dir.exists()


async def test_completion_waits_for_a_watcher(docker_env: SandboxEnvironment) -> None:
    """A background command that finishes while nobody watches is reported to the next
    watcher."""
    session = docker_env.session
    started = await call_tool(docker_env, "exec_command",
                              {"cmd": "echo quick", "run_in_background": True})
    process_id = started.output.split("process_id ")[1].split(";")[0]
    for _ in range(200):  # until the daemon has seen the exit (and had nobody to tell)
        entry = session.commands.sessions.get(process_id)
        if entry is not None and entry.exit_info is not None:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the background command did not finish")
    events = session.watch()
    done = await asyncio.wait_for(events.__anext__(), 5)
    assert (done.process_id, done.status, done.output_tail) == (process_id, "completed", "quick\n")
    await events.aclose()

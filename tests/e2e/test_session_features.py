"""Vault, per-session tool configuration and background events, over real gRPC."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from engine.background import format_report
from engine.remote import RemoteEnvironment
from envd.v1 import environment_pb2 as pb
from tests.daemon import DaemonProcess
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio
SECRET = "tok-9f8e7d6c5b4a"


async def test_vault_reaches_commands_only_masked(envd_daemon: DaemonProcess) -> None:
    env = await RemoteEnvironment.create(
        envd_daemon.target, token=envd_daemon.token, env={"TOKEN": SECRET, "TERM": "xterm"}
    )
    try:
        usable = await call_tool(
            env, "exec_command", {"cmd": f'test "$TOKEN" = {SECRET} && echo same'}
        )
        assert usable.output == "same\n"
        shown = await call_tool(env, "exec_command", {"cmd": "echo $TOKEN; echo $TERM"})
        assert shown.output == "***\ndumb\n"
        argv = await call_tool(
            env,
            "exec_command",
            {"cmd": "sleep 3.3 & ps -eo args | cat; cat /proc/1/cmdline | tr '\\0' ' '"},
        )
        assert "***" not in argv.output and SECRET not in argv.output
        # Nothing outside the command processes carries it: not the container config either.
        session = await env.client.get_session(env.session_id)
        inspect = subprocess.run(
            ["docker", "inspect", session.container_id], capture_output=True, text=True, check=True
        ).stdout
        assert SECRET not in inspect
        assert SECRET not in str(session) and "TOKEN" in session.vault_keys
        # A file written with the secret is masked when read back, too.
        await call_tool(env, "exec_command", {"cmd": "echo $TOKEN > /workspace/leak"})
        read = await call_tool(env, "read_file", {"file_path": "leak"})
        assert SECRET not in read.output
    finally:
        await env.dispose()
    assert SECRET not in envd_daemon.log()


async def test_masking_can_be_turned_off(envd_daemon: DaemonProcess) -> None:
    env = await RemoteEnvironment.create(
        envd_daemon.target,
        token=envd_daemon.token,
        env={"TOKEN": SECRET},
        disable_secret_masking=True,
    )
    try:
        shown = await call_tool(env, "exec_command", {"cmd": "echo $TOKEN"})
        assert shown.output == SECRET + "\n"
    finally:
        await env.dispose()


async def test_per_session_tool_config(envd_daemon: DaemonProcess) -> None:
    env = await RemoteEnvironment.create(
        envd_daemon.target,
        token=envd_daemon.token,
        tools={
            "exec_command": pb.ToolOverride(timeout_ms=500, max_output_length=10),
            "read_image": pb.ToolOverride(disabled=True),
        },
        env_defaults={"GREETING": "hi", "TERM": "vt100"},
    )
    try:
        timed = await call_tool(env, "exec_command", {"cmd": "sleep 5"})
        assert (timed.output, timed.stop_reason) == ("[tool timeout: exceeded 500ms]", "failed")
        short = await call_tool(env, "exec_command", {"cmd": "echo $GREETING $TERM; seq 1 20"})
        assert short.output.startswith("hi dumb\n1\n\n[output truncated: exceeded 10 chars]")
        names = [t.name for t in await env.list_tools()]
        assert "read_image" not in names and "exec_command" in names
        assert await env.tool_permission("read_image") is None
        disabled = await call_tool(env, "read_image", {"source": "x.png"})
        assert disabled.output == "Unknown tool: read_image"
    finally:
        await env.dispose()


async def test_unlimited_output_when_disabled(envd_daemon: DaemonProcess) -> None:
    env = await RemoteEnvironment.create(
        envd_daemon.target,
        token=envd_daemon.token,
        tools={"exec_command": pb.ToolOverride(max_output_length=0)},
    )
    try:
        result = await call_tool(env, "exec_command", {"cmd": "seq 1 30000"})
        assert result.output == "".join(f"{i}\n" for i in range(1, 30001))
    finally:
        await env.dispose()


async def test_background_completion_event(remote_env: RemoteEnvironment) -> None:
    events = remote_env.background_completions()
    first = asyncio.ensure_future(events.__anext__())
    started = await call_tool(
        remote_env,
        "exec_command",
        {"cmd": "echo working; sleep 0.5; echo finished; exit 4", "run_in_background": True},
    )
    process_id = started.output.split("process_id ")[1].split(";")[0]
    assert started.output.startswith("[command running in background with process_id proc-")
    done = await asyncio.wait_for(first, 15)
    assert (done.process_id, done.status, done.exit_code) == (process_id, "failed", 4)
    assert done.output_tail == "working\nfinished\n"
    assert format_report(done) == (
        "[background_task_done]\n"
        "kind: command\n"
        f"id: {process_id}\n"
        "status: failed\n"
        "detail: exit code 4\n"
        "[/background_task_done]\n"
        "\n"
        f"Background command {process_id} (echo working; sleep 0.5; echo finished; exit 4) "
        "failed (exit code 4). Last output:\n"
        "working\nfinished\n"
    )
    await events.aclose()


async def test_reattached_client_reads_unread_output(envd_daemon: DaemonProcess) -> None:
    first = await RemoteEnvironment.create(envd_daemon.target, token=envd_daemon.token)
    started = await call_tool(
        first,
        "exec_command",
        {
            "cmd": "for i in 1 2 3; do echo line$i; sleep 0.3; done; sleep 2; echo end",
            "yield_time_ms": 250,
        },
    )
    process_id = started.output.split("process_id ")[1].split(";")[0]
    await first.client.close()  # the first client goes away without closing the session
    again = await RemoteEnvironment.attach(
        envd_daemon.target, first.session_id, token=envd_daemon.token, owns_session=True
    )
    try:
        polled = await call_tool(
            again, "input_command", {"process_id": process_id, "yield_time_ms": 10000}
        )
        text = started.output + polled.output
        for expected in ("line1", "line2", "line3", "end"):
            assert expected in text
        assert polled.stop_reason == "completed"
    finally:
        await again.dispose()

"""Calls over real gRPC: cancel by RPC, clients that vanish, daemons that vanish, tenants."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path

import grpc
import pytest

from engine.client import EnvdClient
from engine.remote import RemoteEnvironment
from tests.conftest import IMAGE
from tests.daemon import DaemonProcess
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio


async def _wait_for_no_process(env: RemoteEnvironment, pattern: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        result = await call_tool(env, "exec_command",
                                 {"cmd": f"pgrep -f '{pattern}' >/dev/null && echo yes || echo no"})
        if result.output == "no\n":
            return True
        await asyncio.sleep(0.1)
    return False


async def test_cancel_tool_rpc(envd_daemon: DaemonProcess, remote_env: RemoteEnvironment) -> None:
    client = remote_env.client
    call = client.execute(remote_env.session_id, "exec_command",
                          json.dumps({"cmd": "echo go; sleep 30.111"}), "cancel-me")
    messages = []
    started = None
    async for wire in call:
        messages.append(wire)
        if wire.partial_tool_call_output.output == "go\n":
            started = time.monotonic()
            assert await client.cancel(remote_env.session_id, "cancel-me") is True
    assert started is not None and time.monotonic() - started < 2
    final = messages[-1].tool_call_output
    assert final.stop_reason == "aborted"
    assert final.output == "go\n\n[interrupted: tool aborted by user]"
    assert await client.cancel(remote_env.session_id, "cancel-me") is False


async def test_client_disconnect_kills_the_call(envd_daemon: DaemonProcess,
                                                remote_env: RemoteEnvironment) -> None:
    client = EnvdClient(envd_daemon.target, envd_daemon.token)
    call = client.execute(remote_env.session_id, "exec_command",
                          json.dumps({"cmd": "echo go; sleep 30.222"}), "vanish")
    async for wire in call:
        if wire.partial_tool_call_output.output == "go\n":
            break
    await client.close()  # the connection drops mid-call
    assert await _wait_for_no_process(remote_env, "sleep 30[.]222", within=2.0)


async def test_tenants_are_separate(envd_daemon: DaemonProcess) -> None:
    alice = EnvdClient(envd_daemon.target, "token-a")
    bob = EnvdClient(envd_daemon.target, "token-b")
    try:
        session = await alice.create_session()
        sid = session.session_id
        assert sid in [s.session_id for s in await alice.list_sessions()]
        assert sid not in [s.session_id for s in await bob.list_sessions()]
        for attempt in (bob.get_session(sid), bob.list_tools(sid), bob.cancel(sid, "x")):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await attempt
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
        stream = bob.execute(sid, "exec_command", '{"cmd": "id"}', "c1")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stream:
                pass
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert await bob.close_session(sid) is False
        assert (await alice.get_session(sid)).state == 2  # still running
        assert await alice.close_session(sid) is True
    finally:
        await alice.close()
        await bob.close()


async def test_session_listing_hides_the_vault(envd_daemon: DaemonProcess) -> None:
    async with EnvdClient(envd_daemon.target, envd_daemon.token) as client:
        session = await client.create_session(env={"API_TOKEN": "s3cr3t-value"})
        try:
            shown = str(await client.get_session(session.session_id))
            listed = str(await client.list_sessions())
            assert "s3cr3t-value" not in shown + listed
            assert "API_TOKEN" in shown
        finally:
            await client.close_session(session.session_id)
    assert "s3cr3t-value" not in envd_daemon.log()


async def test_daemon_gone_gives_one_failed_output(docker_ready: None) -> None:
    root = Path(tempfile.mkdtemp(prefix="envd-gone-"))
    daemon = DaemonProcess(root / "data", image=IMAGE).start()
    try:
        env = await RemoteEnvironment.create(daemon.target, token=daemon.token)
        waiter = asyncio.ensure_future(
            call_tool(env, "exec_command", {"cmd": "echo go; sleep 30"}))
        await asyncio.sleep(1.0)
        daemon.stop(sig=9)
        result = await waiter
        assert result.stop_reason == "failed"
        assert result.output.startswith("go\n\n[tool error] envd is unreachable")
        after = await call_tool(env, "exec_command", {"cmd": "echo again"})
        assert after.stop_reason == "failed"
        assert after.output.startswith("[tool error] envd is unreachable")
        await env.dispose()
    finally:
        # Restart on the same data dir so that it re-adopts and we can close the session.
        restarted = DaemonProcess(root / "data", image=IMAGE, port=daemon.port).start()
        try:
            async with EnvdClient(restarted.target, restarted.token) as client:
                for s in await client.list_sessions():
                    await client.close_session(s.session_id)
        finally:
            restarted.stop()
            shutil.rmtree(root, ignore_errors=True)

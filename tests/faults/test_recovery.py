"""Daemon restarts (clean and kill -9), orphan reaping, lifecycle limits."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from engine.client import EnvdClient
from engine.remote import RemoteEnvironment
from tests.conftest import IMAGE
from tests.daemon import DaemonProcess
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio


@pytest.fixture
def daemon_dir(docker_ready: None) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="envd-faults-"))
    yield root / "data"
    shutil.rmtree(root, ignore_errors=True)


async def _close_all_and_stop(daemon: DaemonProcess) -> None:
    try:
        async with EnvdClient(daemon.target, daemon.token) as client:
            for session in await client.list_sessions():
                await client.close_session(session.session_id)
    finally:
        daemon.stop()


async def _until_reachable(env: RemoteEnvironment, args: dict, attempts: int = 100):  # type: ignore[no-untyped-def,type-arg]
    for _ in range(attempts):
        result = await call_tool(env, "input_command", args)
        if "envd is unreachable" not in result.output:
            return result
        await asyncio.sleep(0.2)
    raise AssertionError("envd did not come back")


async def test_kill_9_keeps_sessions_and_command_sessions(daemon_dir: Path) -> None:
    daemon = DaemonProcess(daemon_dir, image=IMAGE).start()
    try:
        env = await RemoteEnvironment.create(daemon.target, token=daemon.token)
        await call_tool(env, "write_file", {"file_path": "notes.txt", "content": "keep me\n"})
        started = await call_tool(
            env, "exec_command", {"cmd": "sleep 8; echo ok", "run_in_background": True}
        )
        process_id = started.output.split("process_id ")[1].split(";")[0]
        daemon.stop(sig=9)
        daemon = DaemonProcess(daemon_dir, image=IMAGE, port=daemon.port).start()
        # The same client object goes on with the same session.
        polled = await _until_reachable(env, {"process_id": process_id, "yield_time_ms": 20000})
        assert polled.output == "ok\n", polled.output
        assert polled.stop_reason == "completed"
        kept = await call_tool(env, "read_file", {"file_path": "notes.txt"})
        assert "keep me" in kept.output
        await env.dispose()
    finally:
        await _close_all_and_stop(daemon)


async def test_background_completion_survives_a_restart(daemon_dir: Path) -> None:
    daemon = DaemonProcess(daemon_dir, image=IMAGE).start()
    try:
        env = await RemoteEnvironment.create(daemon.target, token=daemon.token)
        await call_tool(
            env, "exec_command", {"cmd": "sleep 1; echo late", "run_in_background": True}
        )
        daemon.stop(sig=9)
        await asyncio.sleep(2)  # it finishes while no daemon runs
        daemon = DaemonProcess(daemon_dir, image=IMAGE, port=daemon.port).start()
        again = await RemoteEnvironment.attach(daemon.target, env.session_id, token=daemon.token)
        events = again.background_completions()
        done = await asyncio.wait_for(events.__anext__(), 10)
        assert (done.status, done.output_tail) == ("completed", "late\n")
        await events.aclose()
        await again.client.close()
        await env.client.close()
    finally:
        await _close_all_and_stop(daemon)


async def test_unclaimed_containers_are_removed_at_start(daemon_dir: Path) -> None:
    daemon = DaemonProcess(daemon_dir, image=IMAGE).start()
    async with EnvdClient(daemon.target, daemon.token) as client:
        session = await client.create_session()
    daemon.stop(sig=9)
    with sqlite3.connect(daemon_dir / "state.db") as db:
        db.execute("DELETE FROM sessions")
    assert (
        subprocess.run(["docker", "inspect", session.container_id], capture_output=True).returncode
        == 0
    )
    daemon = DaemonProcess(daemon_dir, image=IMAGE, port=daemon.port).start()
    try:
        assert (
            subprocess.run(
                ["docker", "inspect", session.container_id], capture_output=True
            ).returncode
            != 0
        )
        assert not (daemon_dir / "sessions" / session.session_id).exists()
    finally:
        daemon.stop()


async def test_sigterm_aborts_running_calls_and_keeps_sessions(daemon_dir: Path) -> None:
    daemon = DaemonProcess(daemon_dir, image=IMAGE).start()
    try:
        env = await RemoteEnvironment.create(daemon.target, token=daemon.token)
        running = asyncio.ensure_future(
            call_tool(env, "exec_command", {"cmd": "echo go; sleep 30"})
        )
        await asyncio.sleep(1)
        assert daemon.stop() == 0
        result = await running
        assert (result.output, result.stop_reason) == (
            "go\n\n[interrupted: tool aborted by user]",
            "aborted",
        )
        daemon = DaemonProcess(daemon_dir, image=IMAGE, port=daemon.port).start()
        for _ in range(50):
            after = await call_tool(env, "exec_command", {"cmd": "echo back"})
            if after.stop_reason == "completed":
                break
            await asyncio.sleep(0.2)
        assert after.output == "back\n"
        await env.dispose()
    finally:
        await _close_all_and_stop(daemon)


async def test_session_limit(daemon_dir: Path) -> None:
    daemon = DaemonProcess(daemon_dir, image=IMAGE, extra_args=["--max-sessions", "1"]).start()
    try:
        async with EnvdClient(daemon.target, daemon.token) as client:
            await client.create_session()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.create_session()
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "limit of 1 sessions" in (err.value.details() or "")
    finally:
        await _close_all_and_stop(daemon)


async def test_idle_ttl_closes_and_tells(daemon_dir: Path) -> None:
    daemon = DaemonProcess(daemon_dir, image=IMAGE).start()
    try:
        async with EnvdClient(daemon.target, daemon.token) as client:
            session = await client.create_session(idle_ttl_seconds=1)
            events = client.watch(session.session_id)
            event = await asyncio.wait_for(events.__anext__(), 15)
            assert event.session_closed.reason == "idle_timeout"
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.get_session(session.session_id)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            assert (
                subprocess.run(
                    ["docker", "inspect", session.container_id], capture_output=True
                ).returncode
                != 0
            )
    finally:
        daemon.stop()


async def test_idle_ttl_spares_sessions_with_running_commands(daemon_dir: Path) -> None:
    daemon = DaemonProcess(daemon_dir, image=IMAGE).start()
    try:
        env = await RemoteEnvironment.create(daemon.target, token=daemon.token,
                                             idle_ttl_seconds=1)
        await call_tool(env, "exec_command", {"cmd": "sleep 4", "run_in_background": True})
        await asyncio.sleep(2.5)
        assert (await env.client.get_session(env.session_id)).state == 2  # still running
        events = env.client.watch(env.session_id)
        reasons = []
        async for event in events:
            if event.HasField("session_closed"):
                reasons.append(event.session_closed.reason)
                break
        assert reasons == ["idle_timeout"]
        await env.client.close()
    finally:
        await _close_all_and_stop(daemon)

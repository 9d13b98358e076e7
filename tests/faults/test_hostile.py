"""Hostile input: random arguments for every tool, huge requests, planted symlinks, huge lines."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.client import EnvdClient
from engine.remote import RemoteEnvironment
from envd.tools import builtin_tools
from envd.v1 import environment_pb2 as pb
from tests.daemon import DaemonProcess
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=10,
)


def _arguments(tool: str) -> st.SearchStrategy[str]:
    properties = list(builtin_tools()[tool].parameters.get("properties", {}))
    keys = st.sampled_from(properties) if properties else st.text(max_size=8)
    objects = st.dictionaries(keys | st.text(max_size=8), _json_values, max_size=5)
    return st.one_of(
        objects.map(json.dumps),
        st.text(max_size=60),  # not JSON, or JSON that is not an object
        _json_values.map(json.dumps),
    )


@pytest.mark.parametrize("tool", sorted(builtin_tools()))
def test_random_arguments_never_break_the_frame(tool: str, envd_daemon: DaemonProcess) -> None:
    """Through real gRPC: whatever the arguments, exactly one complete output, no exception."""
    with asyncio.Runner() as runner:
        env = runner.run(
            RemoteEnvironment.create(
                envd_daemon.target,
                token=envd_daemon.token,
                tools={name: pb.ToolOverride(timeout_ms=1500) for name in builtin_tools()},
            )
        )
        try:

            @settings(
                max_examples=25,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(_arguments(tool))
            def check(arguments: str) -> None:
                result = runner.run(call_tool(env, tool, arguments))
                assert result.stop_reason in ("completed", "failed", "aborted")

            check()
        finally:
            runner.run(env.dispose())


async def test_huge_arguments(remote_env: RemoteEnvironment) -> None:
    content = "x" * (30 << 20)
    wrote = await call_tool(remote_env, "write_file", {"file_path": "big.txt", "content": content})
    assert wrote.stop_reason == "completed", wrote.output[:300]
    size = await call_tool(remote_env, "exec_command", {"cmd": "stat -c %s big.txt"})
    assert size.output == f"{30 << 20}\n"
    too_big = "y" * (80 << 20)
    result = await call_tool(remote_env, "write_file", {"file_path": "b2", "content": too_big})
    assert result.stop_reason == "failed"
    assert "RESOURCE_EXHAUSTED" in result.output
    assert (await call_tool(remote_env, "exec_command", {"cmd": "echo ok"})).output == "ok\n"


async def test_planted_symlinks(remote_env: RemoteEnvironment) -> None:
    await call_tool(
        remote_env,
        "exec_command",
        {
            "cmd": "ln -s /etc/shadow shadow; ln -s /run/envd/runner.sock sock; "
            "ln -s /opt/envd-runner/runner.py runner; ln -s /scratchpad scratch"
        },
    )
    for path in ("shadow", "sock"):
        result = await call_tool(remote_env, "read_file", {"file_path": path})
        assert result.stop_reason == "failed", result.output
    for path in ("runner", "scratch/x", "/scratchpad/x", "../../etc/passwd-new"):
        result = await call_tool(remote_env, "write_file", {"file_path": path, "content": "pwn"})
        assert result.stop_reason == "failed", (path, result.output)
    check = await call_tool(
        remote_env, "exec_command", {"cmd": "head -c 40 /opt/envd-runner/runner.py; ls /scratchpad"}
    )
    assert check.output.startswith("#!/usr/bin/env python3")


async def test_many_megabyte_lines_and_full_speed_output(remote_env: RemoteEnvironment) -> None:
    line = await call_tool(
        remote_env,
        "exec_command",
        {"cmd": "head -c 20M /dev/zero | tr '\\0' a > long.txt; echo >> long.txt; cat long.txt"},
    )
    assert line.output.startswith("a" * 16000 + "\n[output truncated: exceeded 16000 chars]")
    read = await call_tool(remote_env, "read_file", {"file_path": "long.txt"})
    assert read.stop_reason == "completed"
    assert "… [line truncated]" in read.output and len(read.output) < 64000
    fast = await call_tool(remote_env, "exec_command", {"cmd": "yes | head -c 100M"})
    assert fast.output.startswith("y\ny\n") and fast.stop_reason == "completed"


async def test_garbage_session_ids(envd_daemon: DaemonProcess) -> None:
    async with EnvdClient(envd_daemon.target, envd_daemon.token) as client:
        for bad in ("", "x" * 10000, "s-../../../etc", "\x00\x01", "s-" + "0" * 20):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.get_session(bad)
            assert err.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)
            assert len(err.value.details() or "") < 200

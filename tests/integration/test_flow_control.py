"""Live output is flow-controlled per process: a consumer that stops reading holds up its own
process only, never the connection the sandbox's other calls and replies share."""

from __future__ import annotations

import asyncio
import time

import pytest

from envd.channel import STREAM_CREDIT
from envd.environment import SandboxEnvironment
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio


async def test_a_stalled_consumer_holds_up_only_its_process(
    sandbox_env: SandboxEnvironment,
) -> None:
    channel = sandbox_env.session.channel
    async with channel.subscribe("stalled") as stream:
        await channel.call(
            "spawn",
            id="stalled",
            cmd="yes",
            cwd=sandbox_env.session.handle.workspace,
            env={},
            attach=True,
        )
        # yes writes as fast as it can and nobody reads: the credit runs out...
        def held() -> int:
            return sum(event.size for event in stream.queue._queue)  # type: ignore[attr-defined]

        for _ in range(500):
            if held() >= STREAM_CREDIT:  # the runner sends until its credit is spent
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"only {held()} bytes arrived")
        # ... and nothing more arrives while it stays unread.
        stalled_at = held()
        await asyncio.sleep(0.5)
        assert held() == stalled_at <= STREAM_CREDIT + (256 << 10)
        started = time.monotonic()
        other = await call_tool(sandbox_env, "exec_command", {"cmd": "echo unaffected"})
        assert other.output == "unaffected\n"
        assert time.monotonic() - started < 2
        # Reading on lets the process go on.
        for _ in range(len(stream.queue._queue) + 8):  # type: ignore[attr-defined]
            await stream.next(5)
        assert stream.queue.qsize() > 0 or (await stream.next(5)) is not None
        await channel.call("forget", id="stalled")

"""kill_command: stop a command session, after handing over the output nobody has read yet.

SIGTERM to the process group, SIGKILL after a grace period (the runner does both and replies
once the leader is gone); the session is removed either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any

from envd.channel import ChannelClosed, ProcStream, RunnerCallError
from envd.commands import CommandSession, forward_while, stream_until
from envd.tools.base import (
    DESCRIPTION_PROPERTY,
    Tool,
    ToolContext,
    ToolFailure,
    ToolResult,
    require_string,
)

# After the kill reply the runner drains the output for at most 50 ms, then sends the exit.
EXIT_WAIT_S = 5.0


def unknown_process(process_id: str) -> str:
    return (
        f"[kill_command error: unknown process_id {process_id} "
        "(the session may have exited and been cleared)]"
    )


def killed_note(process_id: str) -> str:
    return (
        f"[process {process_id} killed "
        "(SIGTERM to the process group, SIGKILL after a grace period)]"
    )


def exited_note(process_id: str, info: dict[str, Any] | None) -> str:
    info = info or {}
    sig = info.get("signal")
    if sig:
        try:
            how = f"terminated by signal {signal.Signals(int(sig)).name}"
        except ValueError:
            how = f"terminated by signal {sig}"
    else:
        code = info.get("code")
        how = f"exit code {'unknown' if code is None else code}"
    return f"[process {process_id} had already exited ({how}); session removed]"


async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    process_id = require_string(args, "process_id", "kill_command")
    entry = ctx.commands.get(process_id)
    if entry is None:
        raise ToolFailure(unknown_process(process_id))
    if entry.lock.locked():
        # A poll is attached and streaming: it forwards the output and reports the exit itself.
        killed, info = await _kill(ctx, process_id, None)
        ctx.commands.remove(process_id)
        return _result(process_id, killed, info or entry.exit_info)
    async with entry.lock:
        return await _attach_and_kill(entry, ctx)


async def _attach_and_kill(entry: CommandSession, ctx: ToolContext) -> ToolResult:
    process_id = entry.id
    channel = ctx.channel
    loop = asyncio.get_running_loop()
    killed = gone = False
    async with channel.subscribe(process_id) as stream:
        settled = False
        try:
            # Attaching hands over what the runner kept; whatever the process writes while it
            # is being terminated follows live, up to its exit.
            request, info = await forward_while(
                stream, ctx.emit, channel.call("attach", id=process_id)
            )
            try:
                running = bool(request.result().get("running"))
            except RunnerCallError as exc:
                if exc.code != "ESRCH":
                    raise
                # Unknown to the runner: its exit went to a poll that was cut short, if anywhere.
                gone = True
            if not gone:
                if info is None and running:
                    killed, info = await _kill(ctx, process_id, stream)
                if info is None:
                    info = await stream_until(stream, ctx.emit, loop.time() + EXIT_WAIT_S)
                if info is None:
                    # No exit within the bound (stuck in the kernel): drop it from the runner.
                    with contextlib.suppress(RunnerCallError):
                        await channel.call("forget", id=process_id)
            settled = True
        finally:
            if not settled:
                stream.close()
                with contextlib.suppress(RunnerCallError, ChannelClosed):
                    await asyncio.shield(channel.call("detach", id=process_id))
    ctx.commands.remove(process_id)
    if gone and entry.exit_info is None:
        raise ToolFailure(unknown_process(process_id))
    return _result(process_id, killed, info or entry.exit_info)


async def _kill(
    ctx: ToolContext, process_id: str, stream: ProcStream | None
) -> tuple[bool, dict[str, Any] | None]:
    """(whether this call killed it, exit info if known). With a stream, its output is forwarded
    meanwhile (the grace period can be a second of output)."""
    info = None
    try:
        if stream is None:
            reply = await ctx.commands.kill(process_id)
        else:
            request, info = await forward_while(stream, ctx.emit, ctx.commands.kill(process_id))
            reply = request.result()
    except RunnerCallError as exc:
        if exc.code != "ESRCH":
            raise
        return False, info  # it exited and was delivered before the kill arrived
    if reply.get("already_exited"):
        return False, info or reply
    return True, info


def _result(process_id: str, killed: bool, info: dict[str, Any] | None) -> ToolResult:
    return ToolResult(note=killed_note(process_id) if killed else exited_note(process_id, info))


TOOL = Tool(
    name="kill_command",
    description=(
        "Stop a command session started by exec_command: returns the output not yet read, then "
        "sends SIGTERM to its process group (SIGKILL after a grace period) and removes the "
        "session."
    ),
    parameters={
        "type": "object",
        "properties": {
            "process_id": {
                "type": "string",
                "description": "The process_id reported by exec_command (proc-…).",
            },
            "description": DESCRIPTION_PROPERTY,
        },
        "required": ["process_id"],
        "additionalProperties": False,
    },
    run=run,
    permission="rw",
    timeout_ms=30_000,
    max_output_length=16_000,
)

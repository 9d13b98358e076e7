"""exec_command: run ``bash -lc CMD`` in the sandbox, streaming its output.

A command still running at ``yield_time_ms`` becomes a command session (driven by input_command
and kill_command); ``run_in_background`` returns at once and its completion arrives as an event.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from envd.channel import ChannelClosed, RunnerCallError
from envd.commands import detach, exit_result, new_process_id, stream_until
from envd.tools.base import (
    DESCRIPTION_PROPERTY,
    Tool,
    ToolContext,
    ToolResult,
    optional_bool,
    optional_string,
    require_string,
)

DEFAULT_YIELD_MS = 60_000
MIN_YIELD_MS = 250


def clamp_yield(value: Any, default: int, timeout_ms: int) -> int | None:
    """The reference clamp: default for a non-number, at least 250 ms, and at most 1 s before
    the call's timeout (no maximum when the timeout is disabled).

    None when the timeout leaves no room for a yield window (under 1.25 s): a caller that asked
    for such a short timeout wants the command bounded by it, not moved to a command session."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        value = default
    ms = max(float(value), MIN_YIELD_MS)
    if timeout_ms > 0:
        if timeout_ms - 1000 < MIN_YIELD_MS:
            return None
        ms = min(ms, timeout_ms - 1000)
    return int(ms)


def running_note(process_id: str) -> str:
    return (
        f"[process running with process_id {process_id}; "
        "use input_command to send input or poll for output]"
    )


def background_note(process_id: str) -> str:
    return (
        f"[command running in background with process_id {process_id}; its completion will "
        "arrive as a user message — no need to poll. Use input_command to interact or "
        "kill_command to stop it]"
    )


async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    cmd = require_string(args, "cmd", "exec_command")
    workdir = ctx.resolve(optional_string(args, "workdir") or ctx.workspace)
    background = optional_bool(args, "run_in_background")
    yield_ms = clamp_yield(args.get("yield_time_ms"), DEFAULT_YIELD_MS, ctx.timeout_ms)
    process_id = new_process_id()
    channel = ctx.channel
    loop = asyncio.get_running_loop()

    async with channel.subscribe(process_id) as stream:
        try:
            await channel.call(
                "spawn",
                id=process_id,
                cmd=cmd,
                cwd=workdir,
                env=dict(ctx.command_env),
                attach=not background,
                orphan="keep" if background else "kill",
                meta={"background": background},
            )
        except RunnerCallError as exc:
            return ToolResult(note=f"[spawn error: {exc}]", stop_reason="failed")
        if background:
            await ctx.commands.add(process_id, cmd, background=True)
            return ToolResult(note=background_note(process_id))

        settled = False
        try:
            deadline = None if yield_ms is None else loop.time() + yield_ms / 1000
            info = await stream_until(stream, ctx.emit, deadline)
            if info is None:
                # Still running at the yield: it becomes a command session.
                info = await detach(channel, stream, ctx.emit, process_id, orphan="keep")
                if info is None:
                    await ctx.commands.add(process_id, cmd, background=False)
            settled = True
        finally:
            if not settled:
                # Timeout, abort, client gone or runner lost: the process goes with the call.
                stream.close()
                with contextlib.suppress(RunnerCallError, ChannelClosed):
                    await asyncio.shield(ctx.commands.kill(process_id))
    if info is None:
        return ToolResult(note=running_note(process_id))
    return exit_result(info)


TOOL = Tool(
    name="exec_command",
    description=(
        "Run a shell command (bash -lc) in the sandbox and return its combined stdout and "
        "stderr. Commands still running after yield_time_ms keep running as a command session: "
        "use input_command to send input or poll, kill_command to stop. Set "
        "run_in_background for long jobs whose completion should be reported later."
    ),
    parameters={
        "type": "object",
        "properties": {
            "cmd": {"type": "string", "description": "The shell command to run."},
            "workdir": {
                "type": "string",
                "description": "Working directory; relative paths resolve against the workspace.",
            },
            "yield_time_ms": {
                "type": "number",
                "description": "How long to wait for the command before returning (default 60000).",
            },
            "run_in_background": {
                "type": "boolean",
                "description": "Return at once; the completion is reported when it exits.",
            },
            "description": DESCRIPTION_PROPERTY,
        },
        "required": ["cmd"],
        "additionalProperties": False,
    },
    run=run,
    permission="rw",
    timeout_ms=120_000,
    max_output_length=16_000,
)

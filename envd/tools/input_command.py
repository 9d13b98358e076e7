"""input_command: write to a command session's stdin (or interrupt it), then stream its output.

The poll attaches to the process in the runner (which hands over the output nobody has read yet,
then goes live) and detaches when the yield window ends. Cancelling the call ends the poll only:
the process keeps running and its later output is kept for the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from envd.channel import ChannelClosed, ProcStream, RunnerCallError
from envd.commands import CommandSession, detach, exit_result, forward_while, stream_until
from envd.tools.base import (
    DESCRIPTION_PROPERTY,
    Tool,
    ToolContext,
    ToolFailure,
    ToolResult,
    optional_string,
    require_string,
)
from envd.tools.exec_command import clamp_yield

CTRL_C = "\u0003"
WRITE_YIELD_MS = 250
POLL_YIELD_MS = 120_000

MIXED_CTRL_C = (
    "[input_command error: chars mixes U+0003 (Ctrl-C) with other content; "
    'send "\\u0003" alone to interrupt]'
)
STDIN_CLOSED_NOTE = "[input not delivered: the process's stdin is closed]"


def unknown_process(process_id: str) -> str:
    return (
        f"[input_command error: unknown process_id {process_id} "
        "(the session may have exited and been cleared)]"
    )


def still_running_note(process_id: str) -> str:
    return f"[process still running with process_id {process_id}]"


async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    process_id = require_string(args, "process_id", "input_command")
    chars = optional_string(args, "chars", "") or ""
    if CTRL_C in chars and chars != CTRL_C:
        raise ToolFailure(MIXED_CTRL_C)
    entry = ctx.commands.get(process_id)
    if entry is None:
        raise ToolFailure(unknown_process(process_id))
    default_ms = WRITE_YIELD_MS if chars else POLL_YIELD_MS
    yield_ms = clamp_yield(args.get("yield_time_ms"), default_ms, ctx.timeout_ms)
    async with entry.lock:
        if ctx.commands.sessions.get(process_id) is not entry:
            # The poll we waited for saw it exit (or it was killed or evicted).
            raise ToolFailure(unknown_process(process_id))
        return await _poll(entry, chars, yield_ms, ctx)


async def _poll(
    entry: CommandSession, chars: str, yield_ms: int | None, ctx: ToolContext
) -> ToolResult:
    process_id = entry.id
    channel = ctx.channel
    loop = asyncio.get_running_loop()
    notes: list[str] = []
    # Written before attaching: output it causes meanwhile waits in the runner, so no reply
    # can queue up behind output that nobody reads yet.
    try:
        if chars == CTRL_C:
            await channel.call("signal", id=process_id, signal="SIGINT")
        elif chars:
            await channel.call("stdin", chars.encode("utf-8", "surrogatepass"), id=process_id)
    except RunnerCallError as exc:
        if exc.code == "EPIPE":
            notes.append(STDIN_CLOSED_NOTE)  # it exited, or closed its stdin; poll all the same
        elif exc.code != "ESRCH":  # ESRCH: gone from the runner; the attach below says so
            raise ToolFailure(
                f"[input_command error: could not write to process_id {process_id}: {exc}]"
            ) from None
    # No window (a timeout too short for one): the call's own timeout ends the poll.
    deadline = None if yield_ms is None else loop.time() + yield_ms / 1000

    async with channel.subscribe(process_id) as stream:
        settled = False
        try:
            info, gone = await _attach(stream, process_id, ctx)
            if not gone and info is None:
                info = await stream_until(stream, ctx.emit, deadline)
                if info is None:
                    info = await detach(channel, stream, ctx.emit, process_id)
            settled = True
        finally:
            if not settled:
                # Cancelled (abort, timeout) or failed: end the poll, never the process. Output
                # still in flight to this stream is lost; the rest stays in the runner.
                stream.close()
                with contextlib.suppress(RunnerCallError, ChannelClosed):
                    await asyncio.shield(channel.call("detach", id=process_id))

    if gone:
        ctx.commands.remove(process_id)
        if entry.exit_info is None:
            raise ToolFailure(unknown_process(process_id))
        info = entry.exit_info  # its exit went to a poll that was cut short; the output with it
    if info is None:
        if ctx.commands.sessions.get(process_id) is not entry:
            # Evicted or killed while this poll ran; no exit came to this stream.
            notes.append(f"[process {process_id} was stopped and its session removed meanwhile]")
            return ToolResult(note="\n".join(notes))
        notes.append(still_running_note(process_id))
        return ToolResult(note="\n".join(notes))
    ctx.commands.remove(process_id)
    result = exit_result(info)
    if notes:
        result.note = "\n".join([*notes, *([result.note] if result.note else [])])
    return result


async def _attach(
    stream: ProcStream, process_id: str, ctx: ToolContext
) -> tuple[dict[str, Any] | None, bool]:
    """Attach and forward what the runner kept: (exit info if it came, gone from the runner)."""
    request, info = await forward_while(
        stream, ctx.emit, ctx.channel.call("attach", id=process_id)
    )
    try:
        request.result()
    except RunnerCallError as exc:
        if exc.code != "ESRCH":
            raise
        return None, True
    return info, False


TOOL = Tool(
    name="input_command",
    description=(
        "Send input to a running command session (started by exec_command) and return its new "
        "output. chars is written to stdin verbatim (no newline added; include \\n to submit a "
        'line); "\\u0003" alone sends Ctrl-C (SIGINT) to the process group. With empty chars '
        "it polls for output until the process exits or yield_time_ms passes."
    ),
    parameters={
        "type": "object",
        "properties": {
            "process_id": {
                "type": "string",
                "description": "The process_id reported by exec_command (proc-…).",
            },
            "chars": {
                "type": "string",
                "description": (
                    'Text to write to stdin verbatim (default ""; nothing written: just poll). '
                    '"\\u0003" alone interrupts the process.'
                ),
            },
            "yield_time_ms": {
                "type": "number",
                "description": (
                    "How long to wait for output before returning (default 250 after a write, "
                    "120000 for an empty poll)."
                ),
            },
            "description": DESCRIPTION_PROPERTY,
        },
        "required": ["process_id"],
        "additionalProperties": False,
    },
    run=run,
    permission="rw",
    timeout_ms=130_000,
    max_output_length=16_000,
)

"""The execution frame: one place that turns a tool's run into the reference's message stream.

For every call, whatever the tool: ``start``; the tool's text as ``delta``s (head kept up to the
output limit, the rest archived in the scratchpad); notes in the reference order; ``stop`` with the
final ``stop_reason``; then exactly one complete ``tool_call_output`` equal to the concatenation of
the deltas. Timeouts, the caller's abort and any exception end up as notes, never as exceptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine import omni
from engine.omni import OmniMessage, StopReason
from envd.masking import SecretMasker
from envd.scratchpad import OutputArchive, Scratchpad
from envd.tools.base import Tool, ToolContext, ToolError, ToolFailure, ToolResult

ABORT_NOTE = "[interrupted: tool aborted by user]"
NO_OUTPUT = "[no output]"
_QUEUE_DEPTH = 16
_CANCEL_GRACE_S = 10.0


@dataclass(frozen=True)
class BoundTool:
    """A tool with the limits in force for one session."""

    tool: Tool
    timeout_ms: int
    max_output_length: int

    @property
    def name(self) -> str:
        return self.tool.name


MakeContext = Callable[[BoundTool, str, Callable[[str], Any]], ToolContext]


def parse_arguments(name: str, arguments: str) -> dict[str, Any] | str:
    """The call's arguments as an object, or the text that explains why they are unusable."""
    if not arguments or not arguments.strip():
        return (
            f'Tool call "{name}" failed: the arguments field is empty. '
            "Re-issue the call with a complete JSON object."
        )
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        return (
            f'Tool call "{name}" failed: the arguments are not valid JSON ({exc}). '
            "Re-issue the call with one complete, valid JSON object."
        )
    return value if isinstance(value, dict) else {}


class _Output:
    """The streamed head of a call's output, with online truncation into an archive."""

    def __init__(self, limit: int, archive: Callable[[], OutputArchive]) -> None:
        self.limit = limit
        self.head: list[str] = []
        self.head_chars = 0
        self._new_archive = archive
        self.archive: OutputArchive | None = None

    def feed(self, text: str) -> str:
        """Take more text; return the part to stream now."""
        if self.archive is not None:
            self.archive.write(text)
            return ""
        if self.limit <= 0 or self.head_chars + len(text) <= self.limit:
            self.head.append(text)
            self.head_chars += len(text)
            return text
        room = self.limit - self.head_chars
        streamed = text[:room]
        self.head.append(streamed)
        self.head_chars += len(streamed)
        self.archive = self._new_archive()
        self.archive.write("".join(self.head))
        self.archive.write(text[room:])
        return streamed

    def notes(self) -> list[str]:
        if self.archive is None:
            return []
        return [f"[output truncated: exceeded {self.limit} chars]", self.archive.close()]


async def execute_call(
    call: omni.ToolCallPayload,
    tools: Mapping[str, BoundTool],
    make_context: MakeContext,
    scratchpad: Scratchpad | None,
    signal: asyncio.Event | None = None,
    masker: SecretMasker | None = None,
) -> AsyncIterator[OmniMessage]:
    """Run one call. ``masker`` hides secret values in everything the tool outputs (streamed
    and archived alike)."""
    call_id = call.tool_call_id
    mask = masker if masker else SecretMasker(())

    def delta(text: str, images: list[str] | None = None) -> OmniMessage:
        return omni.partial_tool_call_output(call_id, "delta", text, images=images)

    yield omni.partial_tool_call_output(call_id, "start")

    bound = tools.get(call.name)
    args = parse_arguments(call.name, call.arguments) if bound is not None else None
    if bound is None or isinstance(args, str):
        text = f"Unknown tool: {call.name}" if bound is None else str(args)
        yield delta(text)
        yield omni.partial_tool_call_output(call_id, "stop", stop_reason="failed")
        yield omni.tool_call_output(call_id, text, "failed")
        return
    assert isinstance(args, dict)

    output = _Output(
        bound.max_output_length, lambda: OutputArchive(scratchpad, bound.name, call_id)
    )
    queue: asyncio.Queue[str] = asyncio.Queue(maxsize=_QUEUE_DEPTH)

    async def emit(text: str) -> None:
        if text:
            await queue.put(text)

    context = make_context(bound, call_id, emit)
    runner = asyncio.create_task(_run_tool(bound.tool, args, context))
    aborted = asyncio.create_task(signal.wait()) if signal is not None else None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound.timeout_ms / 1000 if bound.timeout_ms > 0 else None
    cause: str | None = None  # "abort" or "timeout"
    getter: asyncio.Task[str] | None = None
    try:
        while True:
            if getter is None:
                getter = asyncio.create_task(queue.get())
            waiters: set[asyncio.Future[Any]] = {getter, runner}
            if aborted is not None:
                waiters.add(aborted)
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait(waiters, timeout=timeout, return_when="FIRST_COMPLETED")
            if getter in done:
                streamed = output.feed(mask.feed(getter.result()))
                getter = None
                if streamed:
                    yield delta(streamed)
                continue
            if aborted is not None and aborted in done:
                cause = "abort"
            elif runner not in done:
                cause = "timeout"
            break
        getter.cancel()
        getter = None
        if cause is not None:
            await _cancel(runner)
        pending = [queue.get_nowait() for _ in range(queue.qsize())]
        streamed = output.feed(mask.feed("".join(pending)) + mask.flush())
        if streamed:
            yield delta(streamed)

        result: ToolResult | None = None
        error: str | None = None
        failure: str | None = None
        if cause is None:
            exc = runner.exception()
            if isinstance(exc, ToolFailure):
                failure = str(exc)
            elif exc is not None:
                error = str(exc) or type(exc).__name__
            else:
                result = runner.result()
        if failure is not None:
            # The tool's own explanation is content, streamed like any other output.
            streamed = output.feed(mask.mask(failure))
            if streamed:
                yield delta(streamed)

        notes = output.notes()
        if result is not None and result.note:
            notes.append(result.note)
        reason: StopReason
        if cause == "abort" or (signal is not None and signal.is_set()):
            notes.append(ABORT_NOTE)
            reason = "aborted"
        elif cause == "timeout":
            notes.append(f"[tool timeout: exceeded {bound.timeout_ms}ms]")
            reason = "failed"
        elif error is not None:
            notes.append(f"[tool error] {error}")
            reason = "failed"
        elif failure is not None:
            reason = "failed"
        else:
            assert result is not None
            reason = result.stop_reason
        tail = "\n".join(notes)
        if tail and output.head_chars:
            tail = "\n" + tail
        if not tail and not output.head_chars:
            tail = NO_OUTPUT
        if tail:
            yield delta(tail)
        images = result.images if result is not None and reason == "completed" else None
        if images:
            yield delta("", images=images)
        yield omni.partial_tool_call_output(call_id, "stop", stop_reason=reason)
        yield omni.tool_call_output(call_id, "".join(output.head) + tail, reason, images=images)
    finally:
        # Reached early only when our consumer went away (client disconnect): stop the tool.
        if getter is not None:
            getter.cancel()
        if aborted is not None:
            aborted.cancel()
        if not runner.done():
            await _cancel(runner)


async def _run_tool(tool: Tool, args: dict[str, Any], context: ToolContext) -> ToolResult:
    result = await tool.run(args, context)
    if not isinstance(result, ToolResult):
        raise ToolError(f"tool {tool.name} returned {type(result).__name__}, not a ToolResult")
    return result


async def _cancel(task: asyncio.Task[Any]) -> None:
    """Cancel a tool run and wait (bounded) for its cleanup, e.g. killing its processes."""
    task.cancel()
    with contextlib.suppress(BaseException):
        await asyncio.wait({task}, timeout=_CANCEL_GRACE_S)

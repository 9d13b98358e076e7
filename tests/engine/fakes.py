"""An in-process Environment for loop tests that do not need a sandbox, and stream checks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from engine import omni
from engine.interface import EnvironmentInterface, Permission, ToolExecutionRequest
from engine.omni import OmniMessage, ToolDefinition


class FakeEnvironment(EnvironmentInterface):
    """Tools: ``echo`` {text, delay_s} streams its text; ``raise`` throws mid-call; ``mute``
    ends without a complete output; ``stubborn`` ignores the abort signal (it records being
    cancelled)."""

    def __init__(self) -> None:
        self.executed: list[str] = []
        self.cancelled: list[str] = []

    async def list_tools(self) -> list[ToolDefinition]:
        return [ToolDefinition(name=n, description=n) for n in ("echo", "raise", "mute")]

    async def tool_permission(self, name: str) -> Permission | None:
        return "r"

    async def execute_tool(self, request: ToolExecutionRequest) -> AsyncIterator[OmniMessage]:
        payload = request.tool_call.payload
        assert isinstance(payload, omni.ToolCallPayload)
        call_id = payload.tool_call_id
        self.executed.append(call_id)
        args = json.loads(payload.arguments or "{}")
        yield omni.partial_tool_call_output(call_id, "start")
        if payload.name == "raise":
            yield omni.partial_tool_call_output(call_id, "delta", "half")
            raise RuntimeError("the tool blew up")
        if payload.name == "mute":
            return
        if payload.name == "stubborn":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.append(call_id)
                raise
        text = str(args.get("text", ""))
        delay = float(args.get("delay_s", 0))
        for i, ch in enumerate(text):
            if request.signal is not None and request.signal.is_set():
                note = "[interrupted: tool aborted by user]"
                yield omni.partial_tool_call_output(call_id, "delta", note)
                yield omni.partial_tool_call_output(call_id, "stop", stop_reason="aborted")
                done = text[:i] + note
                yield omni.tool_call_output(call_id, done, "aborted")
                return
            yield omni.partial_tool_call_output(call_id, "delta", ch)
            await asyncio.sleep(delay / max(len(text), 1))
        yield omni.partial_tool_call_output(call_id, "stop")
        yield omni.tool_call_output(call_id, text or "[no output]")


def check_stream(messages: list[OmniMessage]) -> None:
    """The seed's guarantees on one run's stream: each tool call gets exactly one complete
    output, whose deltas concatenate to it, framed start → delta* → stop → complete; an
    approval decision comes before any output of its call; partial segments of the model are
    closed and followed by their complete message."""
    calls = [m.payload.tool_call_id for m in messages
             if isinstance(m.payload, omni.ToolCallPayload)]
    for call_id in calls:
        frame = [m for m in messages
                 if isinstance(m.payload, omni.PartialToolCallOutputPayload
                               | omni.ToolCallOutputPayload)
                 and m.payload.tool_call_id == call_id]
        if not frame:
            continue  # a call of a request that did not complete
        kinds = [getattr(m.payload, "event_type", "complete") for m in frame]
        assert kinds[0] == "start" and kinds[-2:] == ["stop", "complete"], (call_id, kinds)
        assert set(kinds[1:-2]) <= {"delta"}, (call_id, kinds)
        complete = frame[-1].payload
        assert isinstance(complete, omni.ToolCallOutputPayload)
        deltas = "".join(m.payload.output for m in frame[1:-2])  # type: ignore[attr-defined]
        assert deltas == complete.output, (deltas, complete.output)
        decisions = [i for i, m in enumerate(messages)
                     if isinstance(m.payload, omni.ApprovalDecisionPayload)
                     and m.payload.tool_call_id == call_id]
        first_output = messages.index(frame[0])
        assert len(decisions) <= 1
        if decisions:
            assert decisions[0] < first_output
    for i, message in enumerate(messages):
        payload = message.payload
        if isinstance(payload, omni.PartialTextPayload | omni.PartialThinkingPayload
                      | omni.PartialToolCallPayload) and payload.event_type == "stop":
            follower = messages[i + 1].payload
            assert omni.is_complete_model_message(messages[i + 1]), follower


def of_type(messages: list[OmniMessage], kind: type) -> list:  # type: ignore[type-arg]
    return [m.payload for m in messages if isinstance(m.payload, kind)]


async def collect(stream: AsyncIterator[OmniMessage]) -> list[OmniMessage]:
    return [m async for m in stream]


def output_texts(messages: list[OmniMessage]) -> list[str]:
    """The outputs of the complete tool_call_output messages among ``messages``."""
    return [p.output for p in of_type(messages, omni.ToolCallOutputPayload)]

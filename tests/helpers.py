"""Shared test helpers: run one tool call and check the streaming invariant on the way."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from engine import omni
from engine.interface import EnvironmentInterface, ToolExecutionRequest
from engine.omni import OmniMessage

_counter = 0


@dataclass
class CallResult:
    messages: list[OmniMessage]
    output: str
    stop_reason: str
    images: list[str] | None

    @property
    def deltas(self) -> list[str]:
        return [
            m.payload.output
            for m in self.messages
            if isinstance(m.payload, omni.PartialToolCallOutputPayload)
            and m.payload.event_type == "delta"
        ]


def new_call_id() -> str:
    global _counter
    _counter += 1
    return f"call-{_counter}"


async def call_tool(
    env: EnvironmentInterface,
    name: str,
    arguments: dict[str, Any] | str,
    *,
    call_id: str | None = None,
    signal: asyncio.Event | None = None,
) -> CallResult:
    """Run one call; assert the frame's invariants (start first, stop then exactly one
    complete output, deltas concatenating to it, the request's tool_call_id throughout)."""
    call_id = call_id or new_call_id()
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    request = ToolExecutionRequest(tool_call=omni.tool_call(name, args, call_id), signal=signal)
    messages = [m async for m in env.execute_tool(request)]
    check_stream(messages, call_id)
    final = messages[-1].payload
    assert isinstance(final, omni.ToolCallOutputPayload)
    return CallResult(messages, final.output, str(final.stop_reason), final.images)


def check_stream(messages: list[OmniMessage], call_id: str) -> None:
    assert messages, "no messages"
    partials = messages[:-1]
    first = partials[0].payload
    assert isinstance(first, omni.PartialToolCallOutputPayload) and first.event_type == "start"
    assert first.output == ""
    stop = partials[-1].payload
    assert isinstance(stop, omni.PartialToolCallOutputPayload) and stop.event_type == "stop"
    assert stop.output == ""
    final = messages[-1].payload
    assert isinstance(final, omni.ToolCallOutputPayload)
    assert final.stop_reason in ("completed", "failed", "aborted")
    assert stop.stop_reason == final.stop_reason
    text = ""
    for message in partials:
        payload = message.payload
        assert isinstance(payload, omni.PartialToolCallOutputPayload)
        assert payload.role == "user" and payload.tool_call_id == call_id
        assert payload.stop_reason is not None
        if payload.event_type == "delta":
            assert payload.stop_reason == "completed"
            text += payload.output
    middle = [m.payload.event_type for m in partials[1:-1]]  # type: ignore[attr-defined]
    assert all(kind == "delta" for kind in middle), middle
    assert final.tool_call_id == call_id and final.role == "user"
    assert text == final.output, "deltas do not concatenate to the complete output"
    assert final.output != ""


def containers_with_label(label: str) -> list[str]:
    import subprocess

    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()

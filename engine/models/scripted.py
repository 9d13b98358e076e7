"""A scripted model: replays turns from a JSON file, for tests and demos.

The file is a list of turns, or ``{"turns": [...]}``. Each model request consumes one turn::

    {"thinking": "…", "text": "…",
     "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls"}}]}

``arguments`` is an object or a JSON string (sent verbatim, even when invalid). A turn can
instead make the request fail — ``{"error": "timeout", "message": "…"}`` (any non-completed
status) or ``{"raise": "…"}`` (an exception, as a buggy client would) — and ``delay_s`` waits
before answering (an abort ends the wait). The model records what it was given
(:attr:`requests`) and keeps its committed history (:attr:`history`), so tests can assert
what the model saw.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine import omni
from engine.llm import LLMOutcome, LLMStream, StreamAssembler, ThinkingLevel
from engine.omni import OmniMessage, StopReason, TokenCounts

_CHUNK = 16  # characters per delta: several deltas per segment, like a real stream


class ScriptToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    """Tool name."""
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """The arguments: an object (serialised to JSON) or a raw string."""
    id: str | None = None
    """tool_call_id; generated when omitted."""


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    thinking: str | None = None
    """Reasoning text, streamed first."""
    text: str | None = None
    """The answer text."""
    tool_calls: list[ScriptToolCall] = Field(default_factory=list)
    """Calls to make; a turn without calls ends the task."""
    error: StopReason | None = None
    """End the request with this status instead of answering."""
    message: str | None = None
    """Detail for ``error``."""
    raise_: str | None = Field(default=None, alias="raise")
    """Raise an exception with this text (tests the engine's never-throw guard)."""
    delay_s: float = 0.0
    """Wait this long before answering."""


class ScriptedModel:
    """An LLMInterface that answers from a script."""

    def __init__(self, turns: Sequence[ScriptTurn | dict[str, Any]]) -> None:
        self.turns = [t if isinstance(t, ScriptTurn) else ScriptTurn.model_validate(t)
                      for t in turns]
        self.requests: list[list[OmniMessage]] = []
        self.history: list[OmniMessage] = []
        self.session_usage = omni.empty_token_counts()
        self._next = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        turns = data["turns"] if isinstance(data, dict) else data
        return cls(turns)

    @property
    def remaining(self) -> int:
        return len(self.turns) - self._next

    def set_history(self, messages: Sequence[OmniMessage]) -> None:
        self.history = list(messages)

    def stream_generate(
        self,
        new_messages: Sequence[OmniMessage],
        signal: asyncio.Event | None = None,
        thinking_level: ThinkingLevel | None = None,
    ) -> LLMStream:
        return LLMStream(self._generate(list(new_messages), signal))

    async def _generate(
        self, new_messages: list[OmniMessage], signal: asyncio.Event | None
    ) -> AsyncIterator[OmniMessage | LLMOutcome]:
        self.requests.append(new_messages)
        if self._next >= len(self.turns):
            yield LLMOutcome("failed", "the script has no more turns")
            return
        turn = self.turns[self._next]
        self._next += 1
        if turn.delay_s and await _aborted_within(signal, turn.delay_s):
            yield LLMOutcome("aborted")
            return
        if turn.raise_ is not None:
            raise RuntimeError(turn.raise_)
        if turn.error is not None:
            yield LLMOutcome(turn.error, turn.message)
            return
        assembler = StreamAssembler()
        if turn.thinking:
            for piece in _chunks(turn.thinking):
                for message in assembler.thinking(piece):
                    yield message
        if turn.text:
            for piece in _chunks(turn.text):
                for message in assembler.text(piece):
                    yield message
                await asyncio.sleep(0)  # let an abort land between deltas
                if signal is not None and signal.is_set():
                    for message in assembler.finish("aborted"):
                        yield message
                    yield LLMOutcome("aborted")
                    return
        for index, call in enumerate(turn.tool_calls):
            arguments = (call.arguments if isinstance(call.arguments, str)
                         else json.dumps(call.arguments))
            call_id = call.id or f"call_{self._next}_{index + 1}"
            for message in assembler.tool_call(index, tool_call_id=call_id, name=call.name):
                yield message
            for piece in _chunks(arguments):
                for message in assembler.tool_call(index, arguments=piece):
                    yield message
        for message in assembler.finish():
            yield message
        request = self._usage(new_messages, assembler.completes)
        self.session_usage = omni.add_token_counts(self.session_usage, request)
        yield omni.token_usage(self.session_usage, request)
        self.history += [*new_messages, *assembler.completes]
        yield LLMOutcome("completed")

    def _usage(self, new: list[OmniMessage], answer: list[OmniMessage]) -> TokenCounts:
        # A rough 4-characters-per-token estimate: enough for renderers and cost tests.
        def tokens(messages: list[OmniMessage]) -> int:
            return sum(len(omni.to_json(m)) for m in messages) // 4

        output = tokens(answer)
        return TokenCounts(cache_read=tokens(self.history), cache_write=0, output=output,
                           total=tokens(self.history) + tokens(new) + output)


def _chunks(text: str) -> list[str]:
    return [text[i:i + _CHUNK] for i in range(0, len(text), _CHUNK)] or [""]


async def _aborted_within(signal: asyncio.Event | None, seconds: float) -> bool:
    if signal is None:
        await asyncio.sleep(seconds)
        return False
    try:
        await asyncio.wait_for(signal.wait(), seconds)
    except TimeoutError:
        return False
    return True

"""The seed's LLMInterface in Python: one streaming method, and its outcome.

The TypeScript contract is ``AsyncGenerator<OmniMessage, LLMOutcome>``: the terminal state is
the generator's *return value*. Python async generators cannot return a value, so
``stream_generate`` returns an :class:`LLMStream` instead::

    stream = llm.stream_generate(new_messages, signal=signal)
    async for message in stream:     # partial_* fragments, complete messages, token_usage
        ...
    outcome = stream.outcome         # LLMOutcome(status, message), set once iteration ends

An implementation writes an ordinary async generator that yields OmniMessages and, last, one
:class:`LLMOutcome`, and wraps it: ``return LLMStream(self._generate(...))``. The wrapper turns
that final item into ``.outcome`` and keeps the "never throw" rule for the implementation: an
exception becomes a ``failed`` outcome, a generator that ends without an outcome a ``malformed``
one. :class:`StreamAssembler` helps implementations follow the streaming discipline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from engine import omni
from engine.omni import Fidelity, OmniMessage, StopReason

#: Per-request thinking level (the seed's ThinkingLevelName).
ThinkingLevel = str


@dataclass(frozen=True)
class LLMOutcome:
    """How a model request ended. ``message`` carries the failure detail (non-completed only)."""

    status: StopReason
    message: str | None = None


class LLMStream:
    """The messages of one model request (``async for``), then its :attr:`outcome`."""

    def __init__(self, source: AsyncIterator[OmniMessage | LLMOutcome]) -> None:
        self._source = source
        self._outcome: LLMOutcome | None = None

    def __aiter__(self) -> LLMStream:
        return self

    async def __anext__(self) -> OmniMessage:
        if self._outcome is not None:
            raise StopAsyncIteration
        try:
            item = await self._source.__anext__()
        except StopAsyncIteration:
            self._outcome = LLMOutcome("malformed", "the model stream ended without an outcome")
            raise
        except Exception as exc:  # the "never throw" rule, enforced for the implementation
            self._outcome = LLMOutcome("failed", f"{type(exc).__name__}: {exc}")
            raise StopAsyncIteration from exc
        if isinstance(item, LLMOutcome):
            self._outcome = item
            await self.aclose()
            raise StopAsyncIteration
        return item

    @property
    def done(self) -> bool:
        return self._outcome is not None

    @property
    def outcome(self) -> LLMOutcome:
        """The terminal state; ``failed`` when read before the stream was consumed to its end."""
        if self._outcome is None:
            return LLMOutcome("failed", "the model stream was not consumed to its end")
        return self._outcome

    async def aclose(self) -> None:
        """Stop the underlying generator (e.g. when the engine gives up waiting on an abort)."""
        close = getattr(self._source, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):  # closing must not throw into the engine
                await close()
        if self._outcome is None:
            self._outcome = LLMOutcome("aborted")


@runtime_checkable
class LLMInterface(Protocol):
    """A model behind the engine. The implementation owns the conversation history: each call
    gets only this request's new messages (all of one role), and commits them together with its
    answer only when the outcome is ``completed`` — so a failed request can be re-sent as is."""

    def stream_generate(
        self,
        new_messages: Sequence[OmniMessage],
        signal: asyncio.Event | None = None,
        thinking_level: ThinkingLevel | None = None,
    ) -> LLMStream:
        """Never raises. When ``signal`` is set, end soon with an ``aborted`` outcome."""
        ...

    def set_history(self, messages: Sequence[OmniMessage]) -> None:
        """Replace the committed history (resuming a session from its trace)."""
        ...


# --- helpers for implementations -------------------------------------------------------------


@dataclass
class _ToolSegment:
    tool_call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    fidelity: Fidelity | None = None


class StreamAssembler:
    """Turns provider deltas into the streaming discipline: ``start → delta* → stop`` and the
    complete message right after each stop, complete messages settling thinking → text →
    tool_call. Every method returns the messages to yield; :attr:`completes` collects the
    complete messages (what a completed request commits to history).

    A thinking block stays one block while its fidelity is equal (OpenAI-compatible clients stamp
    every delta with the same ``reasoning_field``); text after thinking, or a tool call after
    either, closes the open block. Parallel tool calls stay open until :meth:`finish`, since
    providers may interleave their argument deltas (routed by index)."""

    def __init__(self) -> None:
        self.completes: list[OmniMessage] = []
        self._thinking: list[str] | None = None
        self._thinking_fidelity: Fidelity | None = None
        self._text: list[str] | None = None
        self._tools: dict[int, _ToolSegment] = {}

    def thinking(self, text: str, fidelity: Fidelity | None = None) -> list[OmniMessage]:
        out = self._close_text(None)
        if self._thinking is not None and fidelity != self._thinking_fidelity:
            out += self._close_thinking(None)
        if self._thinking is None:
            self._thinking, self._thinking_fidelity = [], fidelity
            out.append(omni.partial_thinking("start"))
        if text:
            self._thinking.append(text)
            out.append(omni.partial_thinking("delta", text))
        return out

    def text(self, text: str) -> list[OmniMessage]:
        out = self._close_thinking(None)
        if self._text is None:
            self._text = []
            out.append(omni.partial_text("start"))
        if text:
            self._text.append(text)
            out.append(omni.partial_text("delta", text))
        return out

    def tool_call(self, index: int, *, tool_call_id: str | None = None, name: str | None = None,
                  arguments: str = "", fidelity: Fidelity | None = None) -> list[OmniMessage]:
        out = self._close_thinking(None) + self._close_text(None)
        segment = self._tools.get(index)
        if segment is None:
            segment = _ToolSegment(tool_call_id or f"call_{index}", name or "", fidelity=fidelity)
            self._tools[index] = segment
            out.append(omni.partial_tool_call("start", segment.name, "", segment.tool_call_id))
        elif name and not segment.name:
            segment.name = name
        if arguments:
            segment.arguments.append(arguments)
            out.append(omni.partial_tool_call("delta", segment.name, arguments,
                                              segment.tool_call_id))
        return out

    def finish(self, stop_reason: StopReason | None = None) -> list[OmniMessage]:
        """Close everything still open; ``stop_reason`` marks an abnormal end."""
        out = self._close_thinking(stop_reason) + self._close_text(stop_reason)
        for index in sorted(self._tools):
            segment = self._tools.pop(index)
            arguments = "".join(segment.arguments)
            out.append(omni.partial_tool_call("stop", segment.name, "", segment.tool_call_id,
                                              stop_reason))
            complete = omni.tool_call(segment.name, arguments, segment.tool_call_id)
            if segment.fidelity is not None:
                complete.payload.fidelity = segment.fidelity  # type: ignore[attr-defined]
            out.append(self._settle(complete, stop_reason))
        return out

    @property
    def tool_calls(self) -> list[OmniMessage]:
        return [m for m in self.completes if isinstance(m.payload, omni.ToolCallPayload)]

    def _close_thinking(self, stop_reason: StopReason | None) -> list[OmniMessage]:
        if self._thinking is None:
            return []
        text, fidelity = "".join(self._thinking), self._thinking_fidelity
        self._thinking, self._thinking_fidelity = None, None
        return [omni.partial_thinking("stop", stop_reason=stop_reason),
                self._settle(omni.thinking(text, fidelity), stop_reason)]

    def _close_text(self, stop_reason: StopReason | None) -> list[OmniMessage]:
        if self._text is None:
            return []
        text = "".join(self._text)
        self._text = None
        return [omni.partial_text("stop", stop_reason=stop_reason),
                self._settle(omni.assistant_text(text), stop_reason)]

    def _settle(self, message: OmniMessage, stop_reason: StopReason | None) -> OmniMessage:
        if stop_reason is not None:
            message.payload.stop_reason = stop_reason  # type: ignore[attr-defined]
        self.completes.append(message)
        return message

"""An OpenAI-compatible chat-completions model, streaming, with tool calls.

It keeps the conversation history itself (the seed: the implementation owns history and gets
only each request's new messages) and commits a request's input and answer only when the
request completes, so the engine can re-send a failed request as it was. Stream translation:

- ``delta.reasoning_content`` (or ``delta.reasoning``) → ``partial_thinking``; the complete
  ``thinking`` keeps ``fidelity: {reasoning_field: <field>}`` so replay can send it back;
- ``delta.content`` → ``partial_text``;
- ``delta.tool_calls[i]`` → ``partial_tool_call`` per index (parallel calls);
- the final chunk's ``usage`` (``stream_options.include_usage``) → ``token_usage``.

Errors map to the outcome statuses: 401/403 → ``auth``; timeouts, connection errors, 429 and
502/503/504/529 → ``timeout``; an unparseable or truncated stream → ``malformed``; anything else
(400, 404, 500, an error event in the stream) → ``failed``. The SDK's own retries are off:
reconnecting is the engine's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any

import openai
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine import omni
from engine.llm import LLMOutcome, LLMStream, StreamAssembler, ThinkingLevel
from engine.omni import OmniMessage, StopReason, TokenCounts, ToolDefinition

_REASONING_FIELDS = ("reasoning_content", "reasoning")
_TRANSIENT_STATUS = {408, 409, 425, 429, 502, 503, 504, 529}
_AUTH_STATUS = {401, 403}
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high"}


class OpenAICompatConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    """The upstream model id sent with every request."""
    base_url: str | None = None
    """API base URL (…/v1); default: $OPENAI_BASE_URL, else the OpenAI API."""
    api_key: str | None = None
    """API key; default: $OPENAI_API_KEY."""
    system_prompt: str = ""
    """Sent as the first (system) message of every request when not empty."""
    tools: list[ToolDefinition] = Field(default_factory=list)
    """The tool schema offered to the model."""
    max_tokens: int | None = None
    """Output token cap per request (``max_tokens``)."""
    request_timeout_s: float = 120.0
    """Per-request timeout (connect and each read); <= 0 disables."""
    thinking_level: ThinkingLevel | None = None
    """Default ``reasoning_effort`` (none | low | medium | high | xhigh); per-request override."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific request fields, merged into the body verbatim."""


class OpenAICompatModel:
    """An LLMInterface over ``POST {base_url}/chat/completions`` with ``stream: true``."""

    def __init__(self, config: OpenAICompatConfig,
                 client: openai.AsyncOpenAI | None = None) -> None:
        self.config = config
        timeout = config.request_timeout_s if config.request_timeout_s > 0 else None
        self.client = client or openai.AsyncOpenAI(
            api_key=config.api_key or os.environ.get("OPENAI_API_KEY") or "unset",
            base_url=config.base_url or os.environ.get("OPENAI_BASE_URL") or None,
            timeout=timeout,
            max_retries=0,
        )
        self.history: list[OmniMessage] = []
        self.session_usage = omni.empty_token_counts()

    def set_history(self, messages: Sequence[OmniMessage]) -> None:
        self.history = [m for m in messages if omni.is_complete_model_message(m) and not m.origin]

    def stream_generate(
        self,
        new_messages: Sequence[OmniMessage],
        signal: asyncio.Event | None = None,
        thinking_level: ThinkingLevel | None = None,
    ) -> LLMStream:
        return LLMStream(self._generate(list(new_messages), signal, thinking_level))

    async def aclose(self) -> None:
        await self.client.close()

    # --- one request ---------------------------------------------------------------------------

    def request_body(self, new_messages: list[OmniMessage],
                     thinking_level: ThinkingLevel | None = None) -> dict[str, Any]:
        """The chat-completions request for history + ``new_messages`` (without ``stream``)."""
        messages: list[dict[str, Any]] = []
        if self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        messages += to_chat_messages([*self.history, *new_messages])
        body: dict[str, Any] = {"model": self.config.model, "messages": messages}
        if self.config.tools:
            body["tools"] = [tool_schema(t) for t in self.config.tools]
        if self.config.max_tokens:
            body["max_tokens"] = self.config.max_tokens
        effort = _EFFORT.get(thinking_level or self.config.thinking_level or "")
        if effort:
            body["reasoning_effort"] = effort
        return body

    async def _generate(
        self,
        new_messages: list[OmniMessage],
        signal: asyncio.Event | None,
        thinking_level: ThinkingLevel | None,
    ) -> AsyncIterator[OmniMessage | LLMOutcome]:
        roles = {getattr(m.payload, "role", None) for m in new_messages}
        if roles - {"user"}:
            yield LLMOutcome("failed", "new messages must all be user-side, got "
                             f"{sorted(map(str, roles))}")
            return
        body = self.request_body(new_messages, thinking_level)
        assembler = StreamAssembler()
        usage: dict[str, Any] | None = None
        finished = False
        stream: Any = None
        try:
            stream = await _unless_aborted(signal, self.client.chat.completions.create(
                **body, stream=True, stream_options={"include_usage": True},
                extra_body=self.config.extra_body or None))
            if stream is None:
                yield LLMOutcome("aborted")
                return
            iterator = stream.__aiter__()
            while True:
                chunk = await _unless_aborted(signal, _next_chunk(iterator))
                if chunk is None:
                    for message in assembler.finish("aborted"):
                        yield message
                    yield LLMOutcome("aborted")
                    return
                if chunk is _END:
                    break
                data: dict[str, Any] = chunk.model_dump()
                if data.get("usage"):
                    usage = data["usage"]
                for choice in data.get("choices") or []:
                    if choice.get("index", 0) != 0:
                        continue  # n > 1 is never requested
                    for message in _translate(assembler, choice.get("delta") or {}):
                        yield message
                    if choice.get("finish_reason"):
                        finished = True
        except Exception as exc:
            status, detail = classify(exc)
            for message in assembler.finish(status):
                yield message
            yield LLMOutcome(status, detail)
            return
        finally:
            if stream is not None:
                close = getattr(stream, "close", None)
                if close is not None:
                    await close()
        if not finished:
            for message in assembler.finish("malformed"):
                yield message
            yield LLMOutcome("malformed", "the stream ended before a finish_reason")
            return
        for message in assembler.finish():
            yield message
        request = token_counts(usage)
        self.session_usage = omni.add_token_counts(self.session_usage, request)
        yield omni.token_usage(self.session_usage, request)
        self.history += [*new_messages, *assembler.completes]
        yield LLMOutcome("completed")


_END = object()


async def _next_chunk(iterator: Any) -> Any:
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return _END


async def _unless_aborted(signal: asyncio.Event | None, awaitable: Any) -> Any:
    """The awaitable's result, or None when ``signal`` fires first (the awaitable is then
    cancelled, which closes the HTTP response under it)."""
    task = asyncio.ensure_future(awaitable)
    if signal is None:
        return await task
    waiter = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    # A request that failed as we cancelled it: the abort wins.
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return None


def _translate(assembler: StreamAssembler, delta: dict[str, Any]) -> list[OmniMessage]:
    out: list[OmniMessage] = []
    for field in _REASONING_FIELDS:
        reasoning = delta.get(field)
        if isinstance(reasoning, str) and reasoning:
            out += assembler.thinking(reasoning, {"reasoning_field": field})
            break
    content = delta.get("content")
    if isinstance(content, str) and content:
        out += assembler.text(content)
    for call in delta.get("tool_calls") or []:
        function = call.get("function") or {}
        out += assembler.tool_call(
            int(call.get("index") or 0),
            tool_call_id=call.get("id") or None,
            name=function.get("name") or None,
            arguments=function.get("arguments") or "",
        )
    return out


def classify(exc: BaseException) -> tuple[StopReason, str]:
    """The outcome status for an exception from the client or the stream, and its detail."""
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        detail = f"HTTP {code}: {exc.message}"
        if code in _AUTH_STATUS:
            return "auth", detail
        if code in _TRANSIENT_STATUS:
            return "timeout", detail
        return "failed", detail
    if isinstance(exc, openai.APIConnectionError | TimeoutError | ConnectionError):
        return "timeout", detail  # APITimeoutError is an APIConnectionError
    if isinstance(exc, json.JSONDecodeError | ValidationError | openai.APIResponseValidationError):
        return "malformed", detail
    if any(cls.__module__.split(".")[0].startswith("httpx") and cls.__name__.endswith(
            ("TimeoutException", "TransportError")) for cls in type(exc).__mro__):
        return "timeout", detail  # a transport error the SDK did not wrap
    return "failed", detail


def token_counts(usage: dict[str, Any] | None) -> TokenCounts:
    if not usage:
        return omni.empty_token_counts()
    details = usage.get("prompt_tokens_details") or {}
    cache_read = details.get("cached_tokens") or usage.get("prompt_cache_hit_tokens") or 0
    output = usage.get("completion_tokens") or 0
    total = usage.get("total_tokens") or (usage.get("prompt_tokens") or 0) + output
    return TokenCounts(cache_read=int(cache_read), cache_write=0, output=int(output),
                       total=int(total))


def tool_schema(tool: ToolDefinition) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "description": tool.description}
    function["parameters"] = tool.parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def to_chat_messages(messages: Sequence[OmniMessage]) -> list[dict[str, Any]]:
    """OmniMessages as chat-completions messages: consecutive assistant messages merge into one
    (thinking → the field its fidelity names, text → content, tool calls → tool_calls);
    tool_call_output → ``role: tool``; images of tool outputs follow the tool messages as a
    user message, since tool messages carry text only."""
    out: list[dict[str, Any]] = []
    assistant: dict[str, Any] | None = None
    images: list[dict[str, Any]] = []

    def flush_images() -> None:
        if images:
            out.append({"role": "user", "content": [
                {"type": "text", "text": "Images from the tool outputs above:"}, *images]})
            images.clear()

    for message in messages:
        payload = message.payload
        if message.origin or not omni.is_complete_model_message(message):
            continue
        if isinstance(payload, omni.ToolCallOutputPayload):
            assistant = None
            out.append({"role": "tool", "tool_call_id": payload.tool_call_id,
                        "content": payload.output})
            images += [{"type": "image_url", "image_url": {"url": u}}
                       for u in payload.images or []]
            continue
        flush_images()
        role = getattr(payload, "role", "user")
        if role == "assistant":
            if assistant is None:
                assistant = {"role": "assistant", "content": None}
                out.append(assistant)
            if isinstance(payload, omni.TextPayload):
                assistant["content"] = (assistant["content"] or "") + payload.text
            elif isinstance(payload, omni.ThinkingPayload):
                field = (payload.fidelity or {}).get("reasoning_field")
                if isinstance(field, str) and field:  # only where the provider gave it to us
                    assistant[field] = assistant.get(field, "") + payload.thinking
            elif isinstance(payload, omni.ToolCallPayload):
                assistant.setdefault("tool_calls", []).append({
                    "id": payload.tool_call_id, "type": "function",
                    "function": {"name": payload.name, "arguments": payload.arguments}})
            continue
        assistant = None
        if isinstance(payload, omni.TextPayload):
            out.append({"role": "user", "content": payload.text})
        elif isinstance(payload, omni.ImageUrlPayload):
            out.append({"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": payload.image_url}}]})
        elif isinstance(payload, omni.InlineDataPayload):
            url = f"data:{payload.mime_type};base64,{payload.data}"
            out.append({"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": url}}]})
    flush_images()
    return out

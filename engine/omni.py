"""OmniMessage: the engine's one message protocol, as pydantic models.

The JSON of every model here is exactly the seed's shape: an envelope of ``timestamp``, ``type``,
``payload`` and ``origin`` (only when present), snake_case payload fields, and optional fields
present only when they were given. ``fidelity`` is opaque and passes through verbatim.
Serialise with :func:`to_dict` / :func:`to_json` and parse with :func:`parse`: the round trip is
lossless.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

StopReason = Literal["completed", "failed", "aborted", "timeout", "malformed", "auth"]
StreamEventType = Literal["start", "delta", "stop"]
MessageType = Literal["session_meta", "model_msg", "event_msg"]
Fidelity = dict[str, Any]


class _Payload(BaseModel):
    # Unknown keys are kept so that a payload from a newer engine survives a round trip.
    model_config = ConfigDict(extra="allow")


# --- complete model_msg payloads -------------------------------------------------------------


class TextPayload(_Payload):
    type: Literal["text"] = "text"
    role: Literal["user", "assistant"]
    text: str
    fidelity: Fidelity | None = None
    stop_reason: StopReason | None = None


class ThinkingPayload(_Payload):
    type: Literal["thinking"] = "thinking"
    role: Literal["assistant"] = "assistant"
    thinking: str
    fidelity: Fidelity | None = None
    stop_reason: StopReason | None = None


class InlineThinkingPayload(_Payload):
    type: Literal["inline_thinking"] = "inline_thinking"
    role: Literal["assistant"] = "assistant"
    data: str
    mime_type: str
    fidelity: Fidelity | None = None
    stop_reason: StopReason | None = None


class ToolCallPayload(_Payload):
    type: Literal["tool_call"] = "tool_call"
    role: Literal["assistant"] = "assistant"
    name: str
    arguments: str
    tool_call_id: str
    fidelity: Fidelity | None = None
    stop_reason: StopReason | None = None


class ToolCallOutputPayload(_Payload):
    type: Literal["tool_call_output"] = "tool_call_output"
    role: Literal["user"] = "user"
    output: str
    images: list[str] | None = None
    tool_call_id: str
    stop_reason: StopReason | None = None


class ImageUrlPayload(_Payload):
    type: Literal["image_url"] = "image_url"
    role: Literal["user"] = "user"
    image_url: str
    stop_reason: StopReason | None = None


class InlineDataPayload(_Payload):
    type: Literal["inline_data"] = "inline_data"
    role: Literal["user", "assistant"]
    data: str
    mime_type: str
    fidelity: Fidelity | None = None
    stop_reason: StopReason | None = None


# --- streaming partials ----------------------------------------------------------------------


class PartialTextPayload(_Payload):
    type: Literal["partial_text"] = "partial_text"
    role: Literal["assistant"] = "assistant"
    event_type: StreamEventType
    text: str
    stop_reason: StopReason | None = None


class PartialThinkingPayload(_Payload):
    type: Literal["partial_thinking"] = "partial_thinking"
    role: Literal["assistant"] = "assistant"
    event_type: StreamEventType
    thinking: str
    stop_reason: StopReason | None = None


class PartialToolCallPayload(_Payload):
    type: Literal["partial_tool_call"] = "partial_tool_call"
    role: Literal["assistant"] = "assistant"
    event_type: StreamEventType
    name: str
    arguments: str
    tool_call_id: str
    stop_reason: StopReason | None = None


class PartialToolCallOutputPayload(_Payload):
    type: Literal["partial_tool_call_output"] = "partial_tool_call_output"
    role: Literal["user"] = "user"
    event_type: StreamEventType
    output: str
    images: list[str] | None = None
    tool_call_id: str
    stop_reason: StopReason | None = None


# --- event_msg payloads ----------------------------------------------------------------------


class TokenCounts(BaseModel):
    # No defaults: every count is always serialised.
    cache_read: int
    cache_write: int
    output: int
    total: int


def empty_token_counts() -> TokenCounts:
    return TokenCounts(cache_read=0, cache_write=0, output=0, total=0)


def add_token_counts(a: TokenCounts, b: TokenCounts) -> TokenCounts:
    return TokenCounts(cache_read=a.cache_read + b.cache_read,
                       cache_write=a.cache_write + b.cache_write,
                       output=a.output + b.output, total=a.total + b.total)


class RequestBeginPayload(_Payload):
    type: Literal["request_begin"] = "request_begin"


class RequestEndPayload(_Payload):
    type: Literal["request_end"] = "request_end"
    status: StopReason
    message: str | None = None


class ApprovalDecisionPayload(_Payload):
    type: Literal["approval_decision"] = "approval_decision"
    decision: Literal["allow", "deny"]
    tool_call_id: str


class TokenUsagePayload(_Payload):
    type: Literal["token_usage"] = "token_usage"
    session: TokenCounts
    request: TokenCounts


class CompactionBeginPayload(_Payload):
    type: Literal["compaction_begin"] = "compaction_begin"
    reason: Literal["context", "turns", "manual"]
    mode: Literal["summarize", "discard"]
    context: int
    turns: int


class CompactionEndPayload(_Payload):
    type: Literal["compaction_end"] = "compaction_end"
    reason: Literal["context", "turns", "manual"]
    mode: Literal["summarize", "discard"]
    status: StopReason


class AbortPayload(_Payload):
    type: Literal["abort"] = "abort"
    reason: str | None = None


class SubagentPayload(_Payload):
    type: Literal["subagent"] = "subagent"
    session_id: str


# --- session_meta ----------------------------------------------------------------------------


class ToolDefinition(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any] | None = None


class SessionMetaPayload(_Payload):
    # session_meta carries no "type" discriminator in the seed; it is told apart by the envelope.
    session_id: str
    provider: str
    model_id: str
    model_context_window: int | str
    system_prompt: str
    tools: list[ToolDefinition]
    agent_state: str
    workspace: str
    source: Literal["subagent", "schedule"] | None = None


ModelPayload = Annotated[
    TextPayload
    | ThinkingPayload
    | InlineThinkingPayload
    | ToolCallPayload
    | ToolCallOutputPayload
    | ImageUrlPayload
    | InlineDataPayload
    | PartialTextPayload
    | PartialThinkingPayload
    | PartialToolCallPayload
    | PartialToolCallOutputPayload,
    Field(discriminator="type"),
]
EventPayload = Annotated[
    RequestBeginPayload
    | RequestEndPayload
    | ApprovalDecisionPayload
    | TokenUsagePayload
    | CompactionBeginPayload
    | CompactionEndPayload
    | AbortPayload
    | SubagentPayload,
    Field(discriminator="type"),
]

_model_payload: TypeAdapter[Any] = TypeAdapter(ModelPayload)
_event_payload: TypeAdapter[Any] = TypeAdapter(EventPayload)

Payload = _Payload


class OmniMessage(BaseModel):
    """The envelope every message shares; only the payload varies."""

    model_config = ConfigDict(extra="forbid")

    timestamp: str
    type: MessageType
    payload: _Payload
    origin: list[str] | None = None


class OmniMessageError(ValueError):
    """Raised by :func:`parse` for JSON that is not an OmniMessage."""


def now() -> str:
    """ISO-8601 UTC with millisecond precision, as the reference writes timestamps."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_dict(message: OmniMessage) -> dict[str, Any]:
    payload = message.payload
    # Optional fields appear only when given; "type" and "role" always (they have defaults
    # because most payloads admit one value only).
    dumped = payload.model_dump(mode="json", exclude_unset=True)
    for key in ("role", "type"):
        value = getattr(payload, key, None)
        if key not in dumped and value is not None:
            dumped = {key: value, **dumped}
    out: dict[str, Any] = {"timestamp": message.timestamp, "type": message.type, "payload": dumped}
    if "origin" in message.model_fields_set and message.origin is not None:
        out["origin"] = list(message.origin)
    return out


def to_json(message: OmniMessage) -> str:
    return json.dumps(to_dict(message), ensure_ascii=False, separators=(",", ":"))


def parse_payload(message_type: str, payload: dict[str, Any]) -> _Payload:
    if message_type == "session_meta":
        return SessionMetaPayload.model_validate(payload)
    adapter = _model_payload if message_type == "model_msg" else _event_payload
    try:
        result: _Payload = adapter.validate_python(payload)
    except Exception:
        # A payload type this engine does not know: keep it verbatim.
        result = _Payload.model_validate(payload)
    return result


def parse(data: str | bytes | dict[str, Any]) -> OmniMessage:
    """Parse the JSON (text or decoded object) of one OmniMessage."""
    try:
        obj = json.loads(data) if isinstance(data, str | bytes) else data
        if not isinstance(obj, dict):
            raise OmniMessageError("an OmniMessage is a JSON object")
        payload = parse_payload(obj["type"], obj["payload"])
        fields: dict[str, Any] = {
            "timestamp": obj["timestamp"],
            "type": obj["type"],
            "payload": payload,
        }
        if "origin" in obj:
            fields["origin"] = obj["origin"]
        return OmniMessage(**fields)
    except OmniMessageError:
        raise
    except Exception as exc:  # json, key and validation errors alike
        raise OmniMessageError(f"not an OmniMessage: {exc}") from exc


# --- builders --------------------------------------------------------------------------------


def _model(payload: _Payload, origin: list[str] | None = None) -> OmniMessage:
    if origin is None:
        return OmniMessage(timestamp=now(), type="model_msg", payload=payload)
    return OmniMessage(timestamp=now(), type="model_msg", payload=payload, origin=origin)


def _event(payload: _Payload) -> OmniMessage:
    return OmniMessage(timestamp=now(), type="event_msg", payload=payload)


def user_text(text: str) -> OmniMessage:
    return _model(TextPayload(role="user", text=text))


def assistant_text(text: str, fidelity: Fidelity | None = None) -> OmniMessage:
    if fidelity is None:
        return _model(TextPayload(role="assistant", text=text))
    return _model(TextPayload(role="assistant", text=text, fidelity=fidelity))


def tool_call(name: str, arguments: str, tool_call_id: str) -> OmniMessage:
    return _model(ToolCallPayload(name=name, arguments=arguments, tool_call_id=tool_call_id))


def thinking(text: str, fidelity: Fidelity | None = None,
             stop_reason: StopReason | None = None) -> OmniMessage:
    payload = ThinkingPayload(thinking=text)
    if fidelity is not None:
        payload.fidelity = fidelity
    if stop_reason is not None:
        payload.stop_reason = stop_reason
    return _model(payload)


def partial_text(event_type: StreamEventType, text: str = "",
                 stop_reason: StopReason | None = None) -> OmniMessage:
    payload = PartialTextPayload(event_type=event_type, text=text)
    if stop_reason is not None:
        payload.stop_reason = stop_reason
    return _model(payload)


def partial_thinking(event_type: StreamEventType, text: str = "",
                     stop_reason: StopReason | None = None) -> OmniMessage:
    payload = PartialThinkingPayload(event_type=event_type, thinking=text)
    if stop_reason is not None:
        payload.stop_reason = stop_reason
    return _model(payload)


def partial_tool_call(event_type: StreamEventType, name: str, arguments: str,
                      tool_call_id: str, stop_reason: StopReason | None = None) -> OmniMessage:
    payload = PartialToolCallPayload(event_type=event_type, name=name, arguments=arguments,
                                     tool_call_id=tool_call_id)
    if stop_reason is not None:
        payload.stop_reason = stop_reason
    return _model(payload)


def session_meta(payload: SessionMetaPayload) -> OmniMessage:
    return OmniMessage(timestamp=now(), type="session_meta", payload=payload)


def tool_call_output(
    tool_call_id: str,
    output: str,
    stop_reason: StopReason = "completed",
    images: list[str] | None = None,
) -> OmniMessage:
    payload = ToolCallOutputPayload(output=output, tool_call_id=tool_call_id,
                                    stop_reason=stop_reason)
    if images:
        payload.images = list(images)
    return _model(payload)


def partial_tool_call_output(
    tool_call_id: str,
    event_type: StreamEventType,
    output: str = "",
    stop_reason: StopReason = "completed",
    images: list[str] | None = None,
) -> OmniMessage:
    payload = PartialToolCallOutputPayload(
        event_type=event_type, output=output, tool_call_id=tool_call_id, stop_reason=stop_reason
    )
    if images:
        payload.images = list(images)
    return _model(payload)


def approval_decision(tool_call_id: str, decision: Literal["allow", "deny"]) -> OmniMessage:
    return _event(ApprovalDecisionPayload(decision=decision, tool_call_id=tool_call_id))


def request_begin() -> OmniMessage:
    return _event(RequestBeginPayload())


def request_end(status: StopReason, message: str | None = None) -> OmniMessage:
    if message is None:
        return _event(RequestEndPayload(status=status))
    return _event(RequestEndPayload(status=status, message=message))


def token_usage(session: TokenCounts, request: TokenCounts) -> OmniMessage:
    return _event(TokenUsagePayload(session=session, request=request))


def abort(reason: str | None = None) -> OmniMessage:
    return _event(AbortPayload(reason=reason))


def with_origin(message: OmniMessage, hop: str) -> OmniMessage:
    """The message as forwarded one level up: ``hop`` prepended to its origin chain."""
    return message.model_copy(update={"origin": [hop, *(message.origin or [])]})


# --- guards ----------------------------------------------------------------------------------

_PARTIAL_TYPES = frozenset(
    {"partial_text", "partial_thinking", "partial_tool_call", "partial_tool_call_output"}
)


def payload_type(message: OmniMessage) -> str | None:
    value = getattr(message.payload, "type", None)
    return value if isinstance(value, str) else None


def is_partial_payload(message: OmniMessage) -> bool:
    return message.type == "model_msg" and payload_type(message) in _PARTIAL_TYPES


def is_complete_model_message(message: OmniMessage) -> bool:
    return message.type == "model_msg" and payload_type(message) not in _PARTIAL_TYPES


def is_model_message(message: OmniMessage) -> bool:
    return message.type == "model_msg"


def is_event_message(message: OmniMessage) -> bool:
    return message.type == "event_msg"


def is_session_meta(message: OmniMessage) -> bool:
    return message.type == "session_meta"


def is_tool_call_output(message: OmniMessage) -> bool:
    return isinstance(message.payload, ToolCallOutputPayload) and not message.origin


def is_partial_tool_call_output(message: OmniMessage) -> bool:
    return isinstance(message.payload, PartialToolCallOutputPayload) and not message.origin

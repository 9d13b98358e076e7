"""Wire <-> domain translation. Generated protobuf types stop here and in engine/remote.py."""

from __future__ import annotations

import json

from engine import omni
from engine.omni import OmniMessage
from envd.commands import CommandFinished
from envd.errors import InvalidArgument
from envd.frame import BoundTool
from envd.sessions.model import SessionOptions, ToolOverride
from envd.sessions.session import Session, SessionClosed, SessionEvent
from envd.v1 import environment_pb2 as pb

_STATES = {
    "starting": pb.SESSION_STATE_STARTING,
    "running": pb.SESSION_STATE_RUNNING,
    "broken": pb.SESSION_STATE_BROKEN,
    "closed": pb.SESSION_STATE_CLOSED,
}


def options_from_wire(request: pb.CreateSessionRequest) -> SessionOptions:
    network = request.network or "none"
    isolation = request.isolation or "runc"
    if network not in ("none", "bridge"):
        raise InvalidArgument(f"network must be \"none\" or \"bridge\", not {network[:40]!r}")
    if isolation not in ("runc", "gvisor"):
        raise InvalidArgument(f"isolation must be \"runc\" or \"gvisor\", not {isolation[:40]!r}")
    tools = {
        name: ToolOverride(
            timeout_ms=o.timeout_ms if o.HasField("timeout_ms") else None,
            max_output_length=o.max_output_length if o.HasField("max_output_length") else None,
            disabled=o.disabled,
        )
        for name, o in request.tools.items()
    }
    limits = request.limits
    return SessionOptions(
        image=request.image,
        vault=dict(request.env),
        labels=dict(request.labels),
        memory_bytes=limits.memory_bytes,
        cpus=limits.cpus,
        pids=limits.pids,
        scratchpad_bytes=limits.scratchpad_bytes,
        network=network,  # type: ignore[arg-type]
        isolation=isolation,  # type: ignore[arg-type]
        idle_ttl_seconds=request.idle_ttl_seconds,
        tools=tools,
        env_defaults=dict(request.env_defaults),
        mask_secrets=not request.disable_secret_masking,
    )


def session_to_wire(session: Session) -> pb.Session:
    options = session.options
    spec = session.spec
    tools = {}
    for name, override in options.tools.items():
        entry = pb.ToolOverride(disabled=override.disabled)
        if override.timeout_ms is not None:
            entry.timeout_ms = override.timeout_ms
        if override.max_output_length is not None:
            entry.max_output_length = override.max_output_length
        tools[name] = entry
    return pb.Session(
        session_id=session.session_id,
        state=_STATES[session.state],
        image=spec.image,
        container_id=session.handle.sandbox_id,
        workspace=session.handle.workspace,
        scratchpad=session.handle.scratchpad.model_dir,
        labels=options.labels,
        network=spec.network,
        isolation=spec.isolation,
        limits=pb.ResourceLimits(
            memory_bytes=spec.memory_bytes,
            cpus=spec.cpus,
            pids=spec.pids,
            scratchpad_bytes=spec.scratchpad_bytes,
        ),
        created_at=session.created_at,
        last_used_at=session.last_used_at,
        idle_ttl_seconds=options.idle_ttl_seconds,
        vault_keys=sorted(options.vault),
        env_defaults=options.env_defaults,
        tools=tools,
        detail=session.detail,
        backend=session.handle.backend,
        running_calls=len(session.running),
        command_sessions=len(session.commands),
    )


def message_to_wire(message: OmniMessage) -> pb.OmniMessage:
    wire = pb.OmniMessage(timestamp=message.timestamp, type=message.type)
    if message.origin:
        wire.origin.extend(message.origin)
    payload = message.payload
    if isinstance(payload, omni.PartialToolCallOutputPayload):
        wire.partial_tool_call_output.CopyFrom(
            pb.PartialToolCallOutput(
                role=payload.role,
                event_type=payload.event_type,
                output=payload.output,
                images=payload.images or [],
                tool_call_id=payload.tool_call_id,
                stop_reason=payload.stop_reason or "",
            )
        )
    elif isinstance(payload, omni.ToolCallOutputPayload):
        wire.tool_call_output.CopyFrom(
            pb.ToolCallOutput(
                role=payload.role,
                output=payload.output,
                images=payload.images or [],
                tool_call_id=payload.tool_call_id,
                stop_reason=payload.stop_reason or "",
            )
        )
    else:
        wire.json = json.dumps(omni.to_dict(message)["payload"], ensure_ascii=False)
    return wire


def event_to_wire(session_id: str, event: SessionEvent) -> pb.SessionEvent:
    wire = pb.SessionEvent(timestamp=omni.now(), session_id=session_id)
    if isinstance(event, CommandFinished):
        wire.command_finished.CopyFrom(
            pb.CommandFinished(
                process_id=event.process_id,
                status=event.status,
                exit_code=event.exit_code,
                detail=event.detail,
                output_tail=event.output_tail,
                tail_truncated=event.tail_truncated,
                command=event.command,
            )
        )
    elif isinstance(event, SessionClosed):
        wire.session_closed.CopyFrom(pb.SessionClosed(reason=event.reason))
    return wire


def tool_call_from_wire(call: pb.ToolCall) -> omni.ToolCallPayload:
    if not call.tool_call_id:
        raise InvalidArgument("tool_call.tool_call_id is required")
    if not call.name:
        raise InvalidArgument("tool_call.name is required")
    return omni.ToolCallPayload(name=call.name, arguments=call.arguments,
                                tool_call_id=call.tool_call_id)


def tool_to_wire(bound: BoundTool) -> pb.ToolDefinition:
    return pb.ToolDefinition(
        name=bound.name,
        description=bound.tool.description,
        parameters=json.dumps(bound.tool.parameters, separators=(",", ":")),
        permission=bound.tool.permission,
    )

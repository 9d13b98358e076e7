"""The in-process Environment: the EnvironmentInterface over one envd session.

The gRPC servicer is a thin wire translation of exactly this; the conformance suite runs against
both this class and :class:`engine.remote.RemoteEnvironment`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from engine import omni
from engine.interface import EnvironmentInterface, Permission, ToolExecutionRequest
from engine.omni import OmniMessage, ToolDefinition
from envd.sessions.manager import SessionManager
from envd.sessions.session import Session


class SandboxEnvironment(EnvironmentInterface):
    def __init__(self, session: Session, manager: SessionManager | None = None) -> None:
        self.session = session
        self._manager = manager

    async def list_tools(self) -> list[ToolDefinition]:
        return [
            ToolDefinition(name=b.name, description=b.tool.description,
                           parameters=json.loads(json.dumps(b.tool.parameters)))
            for b in self.session.tools.values()
        ]

    async def execute_tool(self, request: ToolExecutionRequest) -> AsyncIterator[OmniMessage]:
        payload = request.tool_call.payload
        if not isinstance(payload, omni.ToolCallPayload):
            call_id = str(getattr(payload, "tool_call_id", ""))
            text = "Tool call failed: the request does not carry a tool_call payload."
            yield omni.partial_tool_call_output(call_id, "start")
            yield omni.partial_tool_call_output(call_id, "delta", text)
            yield omni.partial_tool_call_output(call_id, "stop", stop_reason="failed")
            yield omni.tool_call_output(call_id, text, "failed")
            return
        async for message in self.session.execute(payload, request.signal):
            yield message

    async def tool_permission(self, name: str) -> Permission | None:
        bound = self.session.tools.get(name)
        return None if bound is None else bound.tool.permission

    async def dispose(self) -> None:
        if self._manager is not None:
            await self._manager.close(self.session.session_id, self.session.tenant)

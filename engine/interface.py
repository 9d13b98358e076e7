"""The seed's EnvironmentInterface in Python.

An Environment runs approved tool calls. ``execute_tool`` yields ``partial_tool_call_output``
fragments and ends with exactly one complete ``tool_call_output``; it never raises into the
engine. Implementations: :class:`envd.environment.SandboxEnvironment` (in process) and
:class:`engine.remote.RemoteEnvironment` (over gRPC); one conformance suite runs against both.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from engine.omni import OmniMessage, ToolDefinition

Permission = Literal["r", "rw"]
ApprovalDecision = Literal["allow", "deny"]
ApproveFn = Callable[[OmniMessage], Awaitable[ApprovalDecision]]


@dataclass
class ToolExecutionRequest:
    """One approved call: a complete ``tool_call`` message, and the caller's abort signal."""

    tool_call: OmniMessage
    signal: asyncio.Event | None = None
    approve: ApproveFn | None = None


class EnvironmentInterface(abc.ABC):
    @abc.abstractmethod
    async def list_tools(self) -> list[ToolDefinition]: ...

    @abc.abstractmethod
    def execute_tool(self, request: ToolExecutionRequest) -> AsyncIterator[OmniMessage]: ...

    @abc.abstractmethod
    async def tool_permission(self, name: str) -> Permission | None:
        """``"r"``, ``"rw"``, or None for a tool this environment does not have.

        Async here (unlike the seed's synchronous method) because a remote environment has to
        ask its server; an in-process one answers at once."""

    async def dispose(self) -> None:  # noqa: B027 - optional, idempotent, nothing by default
        """Release runtime resources. Idempotent."""

"""The envd.v1.Environment servicer: authenticate, translate, delegate. Nothing else."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc
import pydantic

from envd import transfer
from envd.errors import (
    CapacityExceeded,
    EnvdError,
    FailedPrecondition,
    InvalidArgument,
    PathNotFound,
    PermissionDeniedError,
    SandboxUnavailable,
    SessionNotFound,
    ShuttingDown,
    TooLarge,
    Unauthenticated,
)
from envd.server import convert
from envd.server.auth import TokenAuth
from envd.sessions.manager import SessionManager
from envd.sessions.session import Session
from envd.v1 import environment_pb2 as pb
from envd.v1 import environment_pb2_grpc as pb_grpc

log = logging.getLogger("envd.server")
Context: TypeAlias = grpc.aio.ServicerContext
R = TypeVar("R")

# One table from error class to status code.
_STATUS: list[tuple[type[EnvdError], grpc.StatusCode]] = [
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (SessionNotFound, grpc.StatusCode.NOT_FOUND),
    (CapacityExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (SandboxUnavailable, grpc.StatusCode.UNAVAILABLE),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (ShuttingDown, grpc.StatusCode.UNAVAILABLE),
    (PathNotFound, grpc.StatusCode.NOT_FOUND),
    (TooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
]


def status_of(error: EnvdError) -> grpc.StatusCode:
    for kind, code in _STATUS:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL


def _status(exc: Exception) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, EnvdError):
        return status_of(exc), str(exc)
    if isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return grpc.StatusCode.INVALID_ARGUMENT, f"invalid {where}: {first.get('msg')}"
    log.exception("unexpected error")
    return grpc.StatusCode.INTERNAL, "internal error (see the daemon log)"


def unary(
    method: Callable[[Any, Any, Context], Awaitable[R]],
) -> Callable[[Any, Any, Context], Awaitable[R]]:
    """Errors become status codes with a clear message, never a traceback on the wire."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Context) -> R:
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            code, message = _status(exc)
            await context.abort(code, message)
            raise  # unreachable: abort raises

    return wrapper


class EnvironmentServicer(pb_grpc.EnvironmentServicer):
    def __init__(self, manager: SessionManager, auth: TokenAuth) -> None:
        self.manager = manager
        self.auth = auth

    def _tenant(self, context: Context) -> str:
        metadata = {
            key.lower(): value
            for key, value in (context.invocation_metadata() or ())
            if isinstance(value, str)
        }
        return self.auth.tenant(metadata)

    def _session(self, session_id: str, context: Context) -> Session:
        return self.manager.get(session_id, self._tenant(context))

    @unary
    async def CreateSession(self, request: pb.CreateSessionRequest, context: Context) -> pb.Session:  # noqa: N802
        tenant = self._tenant(context)
        session = await self.manager.create(convert.options_from_wire(request), tenant)
        return convert.session_to_wire(session)

    @unary
    async def GetSession(self, request: pb.GetSessionRequest, context: Context) -> pb.Session:  # noqa: N802
        return convert.session_to_wire(self._session(request.session_id, context))

    @unary
    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: Context
    ) -> pb.ListSessionsResponse:  # noqa: N802
        sessions = self.manager.list(self._tenant(context), dict(request.labels))
        return pb.ListSessionsResponse(sessions=[convert.session_to_wire(s) for s in sessions])

    @unary
    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: Context
    ) -> pb.CloseSessionResponse:  # noqa: N802
        closed = await self.manager.close(request.session_id, self._tenant(context))
        return pb.CloseSessionResponse(closed=closed)

    @unary
    async def ListTools(
        self, request: pb.ListToolsRequest, context: Context
    ) -> pb.ListToolsResponse:  # noqa: N802
        session = self._session(request.session_id, context)
        return pb.ListToolsResponse(tools=[convert.tool_to_wire(b) for b in session.tools.values()])

    @unary
    async def ToolPermission(
        self, request: pb.ToolPermissionRequest, context: Context
    ) -> pb.ToolPermissionResponse:  # noqa: N802
        bound = self._session(request.session_id, context).tools.get(request.name)
        return pb.ToolPermissionResponse(permission=bound.tool.permission if bound else "")

    @unary
    async def CancelTool(
        self, request: pb.CancelToolRequest, context: Context
    ) -> pb.CancelToolResponse:  # noqa: N802
        session = self._session(request.session_id, context)
        return pb.CancelToolResponse(cancelled=session.cancel(request.tool_call_id))

    async def ExecuteTool(
        self, request: pb.ExecuteToolRequest, context: Context
    ) -> AsyncIterator[pb.OmniMessage]:  # noqa: N802
        try:
            session = self._session(request.session_id, context)
            call = convert.tool_call_from_wire(request.tool_call)
        except Exception as exc:
            await context.abort(*_status(exc))
            return
        # From here on every outcome is a message: the frame never raises. If the client goes
        # away, grpc cancels this generator and the frame kills what the call started.
        async for message in session.execute(call):
            yield convert.message_to_wire(message)

    async def WatchSession(
        self, request: pb.WatchSessionRequest, context: Context
    ) -> AsyncIterator[pb.SessionEvent]:  # noqa: N802
        try:
            session = self._session(request.session_id, context)
        except Exception as exc:
            await context.abort(*_status(exc))
            return
        async for event in session.watch():
            yield convert.event_to_wire(session.session_id, event)

    @unary
    async def UploadFiles(  # noqa: N802
        self, requests: AsyncIterator[pb.UploadFilesRequest], context: Context
    ) -> pb.UploadFilesResponse:
        first = await anext(aiter(requests), None)
        if first is None:
            raise InvalidArgument("UploadFiles needs a first message with the session_id")
        session = self._session(first.session_id, context)

        async def chunks() -> AsyncIterator[bytes]:
            yield first.data
            async for message in requests:
                if message.session_id and message.session_id != first.session_id:
                    raise InvalidArgument("every UploadFiles message must be for one session")
                yield message.data

        result = await transfer.upload(
            session, first.destination, chunks(), self.manager.config.max_upload_bytes
        )
        return pb.UploadFilesResponse(
            destination=result.destination, entries=result.entries, bytes=result.bytes
        )

    async def DownloadFiles(  # noqa: N802
        self, request: pb.DownloadFilesRequest, context: Context
    ) -> AsyncIterator[pb.DownloadFilesChunk]:
        try:
            session = self._session(request.session_id, context)
            # aclosing: a client that goes away stops the packer in the sandbox at once.
            async with contextlib.aclosing(transfer.download(session, request.path)) as stream:
                async for data, hint in stream:
                    yield pb.DownloadFilesChunk(data=data, size_hint=hint)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await context.abort(*_status(exc))

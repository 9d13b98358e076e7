"""RemoteEnvironment: the EnvironmentInterface over gRPC, against one envd session.

Whatever happens to the daemon or the network, every call yields exactly one complete
``tool_call_output`` and never raises: when the stream breaks, the output so far is kept and a
``failed`` output with a note saying why closes the call. Aborting (the request's signal) goes
through ``CancelTool``; the server then ends the stream with ``aborted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc

from engine import omni
from engine.background import CommandCompletion
from engine.client import EnvdClient, TlsOptions, message_from_wire
from engine.interface import EnvironmentInterface, Permission, ToolExecutionRequest
from engine.omni import OmniMessage, ToolDefinition

ABORT_NOTE = "[interrupted: tool aborted by user]"
# After CancelTool, how long the server has to end the stream before we end it ourselves.
_CANCEL_GRACE_S = 5.0


class RemoteEnvironment(EnvironmentInterface):
    def __init__(self, client: EnvdClient, session_id: str, owns_session: bool = True) -> None:
        self.client = client
        self.session_id = session_id
        self.owns_session = owns_session
        self._disposed = False

    @classmethod
    async def create(
        cls,
        target: str,
        token: str | None = None,
        tls: TlsOptions | None = None,
        **session_options: Any,
    ) -> RemoteEnvironment:
        """A new session on the daemon at ``target``; ``dispose`` closes it."""
        client = EnvdClient(target, token, tls)
        try:
            session = await client.create_session(**session_options)
        except BaseException:
            await client.close()
            raise
        return cls(client, session.session_id, owns_session=True)

    @classmethod
    async def attach(
        cls,
        target: str,
        session_id: str,
        token: str | None = None,
        tls: TlsOptions | None = None,
        owns_session: bool = False,
    ) -> RemoteEnvironment:
        """An existing session (e.g. after this process restarted); its command sessions and
        their unread output are all still there."""
        client = EnvdClient(target, token, tls)
        try:
            await client.get_session(session_id)
        except BaseException:
            await client.close()
            raise
        return cls(client, session_id, owns_session=owns_session)

    async def list_tools(self) -> list[ToolDefinition]:
        tools = await self.client.list_tools(self.session_id)
        return [
            ToolDefinition(
                name=t.name,
                description=t.description,
                parameters=json.loads(t.parameters) if t.parameters else None,
            )
            for t in tools
        ]

    async def tool_permission(self, name: str) -> Permission | None:
        permission = await self.client.tool_permission(self.session_id, name)
        return permission if permission in ("r", "rw") else None  # type: ignore[return-value]

    async def execute_tool(self, request: ToolExecutionRequest) -> AsyncIterator[OmniMessage]:
        payload = request.tool_call.payload
        name = str(getattr(payload, "name", ""))
        arguments = str(getattr(payload, "arguments", ""))
        call_id = str(getattr(payload, "tool_call_id", ""))
        state = _CallState(call_id)
        call = self.client.execute(self.session_id, name, arguments, call_id)
        signal = request.signal
        cancel_sent = False
        cancel_deadline: float | None = None
        loop = asyncio.get_running_loop()
        reader: asyncio.Task[Any] | None = None
        waiter: asyncio.Task[Any] | None = None
        failure: str | None = None
        try:
            while not state.complete:
                if reader is None:
                    reader = asyncio.ensure_future(call.read())
                waits: set[asyncio.Future[Any]] = {reader}
                if signal is not None and not cancel_sent:
                    if waiter is None:
                        waiter = asyncio.ensure_future(signal.wait())
                    waits.add(waiter)
                timeout = None if cancel_deadline is None else cancel_deadline - loop.time()
                if timeout is not None and timeout <= 0:
                    failure = "abort"
                    break
                done, _ = await asyncio.wait(waits, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if waiter is not None and waiter in done:
                    waiter = None
                    cancel_sent = True
                    cancel_deadline = loop.time() + _CANCEL_GRACE_S
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        await self.client.cancel(self.session_id, call_id)
                if reader not in done:
                    continue
                try:
                    wire = reader.result()
                except grpc.aio.AioRpcError as exc:
                    failure = _describe_rpc_error(exc)
                    break
                finally:
                    reader = None
                if wire is grpc.aio.EOF:
                    failure = "envd ended the call without a complete output"
                    break
                message = message_from_wire(wire)
                state.see(message)
                yield message
        finally:
            for task in (reader, waiter):
                if task is not None:
                    task.cancel()
            if not state.complete:
                call.cancel()
        if failure is not None:
            aborted = failure == "abort" or (signal is not None and signal.is_set())
            for message in state.close(failure, aborted):
                yield message

    async def background_completions(self) -> AsyncIterator[CommandCompletion]:
        """Completions of this session's background commands, as they happen, until the
        session closes. Raises grpc.aio.AioRpcError when the daemon is unreachable."""
        events = self.client.watch(self.session_id)
        async with contextlib.aclosing(events):
            async for event in events:
                if event.HasField("command_finished"):
                    done = event.command_finished
                    yield CommandCompletion(
                        process_id=done.process_id,
                        command=done.command,
                        status=done.status,
                        exit_code=done.exit_code,
                        detail=done.detail,
                        output_tail=done.output_tail,
                        tail_truncated=done.tail_truncated,
                    )
                elif event.HasField("session_closed"):
                    return

    async def dispose(self) -> None:
        if self._disposed:
            return
        self._disposed = True
        try:
            if self.owns_session:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await self.client.close_session(self.session_id)
        finally:
            await self.client.close()


class _CallState:
    """What a call has streamed so far, so that a broken stream can still be closed properly."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.started = False
        self.stopped = False
        self.complete = False
        self.text: list[str] = []

    def see(self, message: OmniMessage) -> None:
        payload = message.payload
        if message.origin:
            return
        if isinstance(payload, omni.PartialToolCallOutputPayload):
            if payload.event_type == "start":
                self.started = True
            elif payload.event_type == "delta":
                self.text.append(payload.output)
            else:
                self.stopped = True
        elif isinstance(payload, omni.ToolCallOutputPayload):
            self.complete = True

    def close(self, failure: str, aborted: bool) -> list[OmniMessage]:
        """The messages that end the call: the note, stop and the complete output."""
        messages: list[OmniMessage] = []
        if not self.started:
            messages.append(omni.partial_tool_call_output(self.call_id, "start"))
        reason: omni.StopReason = "aborted" if aborted else "failed"
        note = ABORT_NOTE if aborted else f"[tool error] {failure}"
        so_far = "".join(self.text)
        tail = ("\n" if so_far else "") + note
        if not self.stopped:
            messages.append(omni.partial_tool_call_output(self.call_id, "delta", tail))
            messages.append(omni.partial_tool_call_output(self.call_id, "stop",
                                                          stop_reason=reason))
            output = so_far + tail
        else:
            # The stop already went out; the complete output must still equal the deltas.
            output = so_far or note
        messages.append(omni.tool_call_output(self.call_id, output, reason))
        return messages


def _describe_rpc_error(exc: grpc.aio.AioRpcError) -> str:
    code = exc.code()
    detail = exc.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"envd is unreachable ({detail})" if detail else "envd is unreachable"
    if code == grpc.StatusCode.CANCELLED:
        return "the call was cancelled before envd finished it"
    return f"envd refused the call: {code.name}: {detail}"

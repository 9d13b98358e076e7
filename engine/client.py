"""A thin async client of ``envd.v1.Environment``: channel, credentials, wire conversion.

Generated protobuf types stop here; :mod:`engine.remote` builds the EnvironmentInterface on it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from engine import omni, tarstream
from engine.omni import OmniMessage
from envd.v1 import environment_pb2 as pb
from envd.v1 import environment_pb2_grpc as pb_grpc

_MAX_MESSAGE = 64 * 1024 * 1024


@dataclass
class TlsOptions:
    """Server CA (to verify envd), and optionally a client certificate for mutual TLS."""

    ca_cert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    server_name: str | None = None


def message_from_wire(wire: pb.OmniMessage) -> OmniMessage:
    kind = wire.WhichOneof("payload")
    payload: omni.Payload
    if kind == "partial_tool_call_output":
        p = wire.partial_tool_call_output
        payload = omni.PartialToolCallOutputPayload(
            event_type=p.event_type,  # type: ignore[arg-type]
            output=p.output,
            tool_call_id=p.tool_call_id,
            stop_reason=p.stop_reason or None,  # type: ignore[arg-type]
        )
        if p.images:
            payload.images = list(p.images)
    elif kind == "tool_call_output":
        c = wire.tool_call_output
        payload = omni.ToolCallOutputPayload(
            output=c.output,
            tool_call_id=c.tool_call_id,
            stop_reason=c.stop_reason or None,  # type: ignore[arg-type]
        )
        if c.images:
            payload.images = list(c.images)
    elif kind == "json":
        payload = omni.parse_payload(wire.type, json.loads(wire.json))
    else:
        raise ValueError("OmniMessage without a payload")
    if wire.origin:
        return omni.OmniMessage(timestamp=wire.timestamp, type=wire.type,  # type: ignore[arg-type]
                                payload=payload, origin=list(wire.origin))
    return omni.OmniMessage(timestamp=wire.timestamp, type=wire.type,  # type: ignore[arg-type]
                            payload=payload)


class EnvdClient:
    """One gRPC channel to an envd daemon, with the caller's bearer token on every call."""

    def __init__(
        self,
        target: str,
        token: str | None = None,
        tls: TlsOptions | None = None,
    ) -> None:
        self.target = target
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            # Our own subchannels: a fresh client must not inherit another one's reconnect
            # backoff to the same address (e.g. right after the daemon restarted).
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if tls is None:
            self.channel = grpc.aio.insecure_channel(target, options=options)
        else:
            if tls.server_name:
                options.append(("grpc.ssl_target_name_override", tls.server_name))
            credentials = grpc.ssl_channel_credentials(
                root_certificates=tls.ca_cert.read_bytes() if tls.ca_cert else None,
                private_key=tls.client_key.read_bytes() if tls.client_key else None,
                certificate_chain=tls.client_cert.read_bytes() if tls.client_cert else None,
            )
            self.channel = grpc.aio.secure_channel(target, credentials, options=options)
        self.stub = pb_grpc.EnvironmentStub(self.channel)

    @classmethod
    def from_env(cls, target: str | None = None, token: str | None = None) -> EnvdClient:
        """Target, token and TLS from ENVD_TARGET, ENVD_TOKEN (or ENVD_TOKEN_FILE), ENVD_CA."""
        target = target or os.environ.get("ENVD_TARGET", "127.0.0.1:50051")
        if token is None:
            token = os.environ.get("ENVD_TOKEN")
            token_file = os.environ.get("ENVD_TOKEN_FILE")
            if token is None and token_file:
                token = Path(token_file).read_text().strip()
        ca = os.environ.get("ENVD_CA")
        tls = TlsOptions(ca_cert=Path(ca)) if ca else None
        return cls(target, token, tls)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    async def create_session(self, **fields: Any) -> pb.Session:
        session: pb.Session = await self.stub.CreateSession(
            pb.CreateSessionRequest(**fields), metadata=self._metadata
        )
        return session

    async def get_session(self, session_id: str) -> pb.Session:
        session: pb.Session = await self.stub.GetSession(
            pb.GetSessionRequest(session_id=session_id), metadata=self._metadata
        )
        return session

    async def list_sessions(self, labels: dict[str, str] | None = None) -> list[pb.Session]:
        response = await self.stub.ListSessions(
            pb.ListSessionsRequest(labels=labels or {}), metadata=self._metadata
        )
        return list(response.sessions)

    async def close_session(self, session_id: str) -> bool:
        response = await self.stub.CloseSession(
            pb.CloseSessionRequest(session_id=session_id), metadata=self._metadata
        )
        return bool(response.closed)

    async def list_tools(self, session_id: str) -> list[pb.ToolDefinition]:
        response = await self.stub.ListTools(
            pb.ListToolsRequest(session_id=session_id), metadata=self._metadata
        )
        return list(response.tools)

    async def tool_permission(self, session_id: str, name: str) -> str:
        response = await self.stub.ToolPermission(
            pb.ToolPermissionRequest(session_id=session_id, name=name), metadata=self._metadata
        )
        return str(response.permission)

    def execute(self, session_id: str, name: str, arguments: str, tool_call_id: str) -> Any:
        """The raw ExecuteTool call (a grpc.aio stream call)."""
        request = pb.ExecuteToolRequest(
            session_id=session_id,
            tool_call=pb.ToolCall(name=name, arguments=arguments, tool_call_id=tool_call_id),
        )
        return self.stub.ExecuteTool(request, metadata=self._metadata)

    async def cancel(self, session_id: str, tool_call_id: str) -> bool:
        response = await self.stub.CancelTool(
            pb.CancelToolRequest(session_id=session_id, tool_call_id=tool_call_id),
            metadata=self._metadata,
        )
        return bool(response.cancelled)

    async def watch(self, session_id: str) -> AsyncGenerator[pb.SessionEvent, None]:
        call = self.stub.WatchSession(
            pb.WatchSessionRequest(session_id=session_id), metadata=self._metadata
        )
        try:
            async for event in call:
                yield event
        finally:
            # A consumer that stops early must not leave the call tied to its event loop.
            call.cancel()

    # --- file transfer -------------------------------------------------------------------

    async def upload(
        self, session_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes], dest: str = ""
    ) -> pb.UploadFilesResponse:
        """Unpack a tar stream into directory ``dest`` of the sandbox (relative: to the
        workspace; empty: the workspace). All or nothing on the server."""

        failed: list[Exception] = []

        async def requests() -> AsyncIterator[pb.UploadFilesRequest]:
            first: pb.UploadFilesRequest | None = pb.UploadFilesRequest(
                session_id=session_id, destination=dest
            )
            async for chunk in _failures_to(failed, _aiter_bytes(chunks)):
                for start in range(0, len(chunk), tarstream.CHUNK):
                    piece = chunk[start:start + tarstream.CHUNK]
                    if first is not None:
                        first.data = piece
                        yield first
                        first = None
                    else:
                        yield pb.UploadFilesRequest(data=piece)
            if first is not None:
                yield first  # no data: the server says what is wrong with an empty archive

        try:
            response: pb.UploadFilesResponse = await self.stub.UploadFiles(
                requests(), metadata=self._metadata
            )
        except asyncio.CancelledError:
            # grpc cancels the call when the request iterator raises: give the cause instead.
            if failed:
                raise failed[0] from None
            raise
        return response

    async def download_chunks(
        self, session_id: str, path: str = ""
    ) -> AsyncIterator[pb.DownloadFilesChunk]:
        call = self.stub.DownloadFiles(
            pb.DownloadFilesRequest(session_id=session_id, path=path), metadata=self._metadata
        )
        async for chunk in call:
            yield chunk

    async def download(self, session_id: str, path: str = "") -> AsyncIterator[bytes]:
        """A tar stream of a file or directory of the sandbox, rooted at its base name."""
        async for chunk in self.download_chunks(session_id, path):
            yield chunk.data

    async def upload_path(
        self, session_id: str, local: str | Path, dest: str = "", *, contents: bool = False,
        progress: tarstream.Progress | None = None,
    ) -> pb.UploadFilesResponse:
        """Copy a local file or directory into directory ``dest`` of the sandbox, as
        ``dest/<its name>``; ``contents=True``: a directory's entries go straight into ``dest``.
        ``progress(bytes_sent, expected_total)`` follows the archive as it is sent."""
        local = Path(local)
        if not local.exists() and not local.is_symlink():
            raise FileNotFoundError(f"no such file or directory: {local}")
        chunks = tarstream.tar_chunks(local, "." if contents and local.is_dir() else None)
        total = tarstream.size_hint(local)
        return await self.upload(session_id, tarstream.counted(chunks, progress, total), dest)

    async def download_to(
        self, session_id: str, path: str, local_dir: str | Path, *,
        progress: tarstream.Progress | None = None,
    ) -> Path:
        """Copy a file or directory of the sandbox into ``local_dir`` (created when missing),
        as ``local_dir/<its name>``; returns that path. Symlinks stay links and are never
        followed; an unsafe archive is refused whole."""

        async def chunks() -> AsyncIterator[tuple[bytes, int]]:
            async for chunk in self.download_chunks(session_id, path):
                yield chunk.data, chunk.size_hint

        return await tarstream.unpack_chunks(chunks(), Path(local_dir), progress)

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> EnvdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _aiter_bytes(chunks: AsyncIterable[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            yield chunk
    else:
        for chunk in chunks:
            yield chunk


async def _failures_to(
    failed: list[Exception], chunks: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield chunk
    except Exception as exc:
        failed.append(exc)
        raise

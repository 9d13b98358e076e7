"""The daemon's end of a runner connection: requests, replies, and per-process event streams.

One unix-socket connection per sandbox carries every request and every process's output. A
process's events go to its subscriber; ``exit`` events also go to the exit listeners. Live output
is flow-controlled per process: the runner sends at most :data:`STREAM_CREDIT` bytes ahead of
what the subscriber has consumed, and consuming grants more. So a slow consumer slows its own
process down, never the connection's reader, the replies or the other processes on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from envd.runner.runner import FRAME_PREFIX, MAX_BODY, MAX_HEADER, encode_frame

STREAM_CREDIT = 1 << 20
_GRANT_STEP = 256 << 10


class ChannelClosed(ConnectionError):
    """The runner connection is gone (the sandbox died, or the runner was killed)."""


class RunnerCallError(Exception):
    """The runner refused or failed a request."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ProcEvent:
    kind: str  # "out", "exit" or "closed"
    text: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    size: int = 0  # bytes on the wire, for flow control


class _ConsumedQueue(asyncio.Queue[ProcEvent]):
    """A queue that reports every event taken out of it, however it is taken."""

    def __init__(self, on_taken: Callable[[ProcEvent], None]) -> None:
        super().__init__()
        self._on_taken = on_taken

    def _get(self) -> ProcEvent:
        event: ProcEvent = super()._get()
        self._on_taken(event)
        return event


class ProcStream:
    """Events of one process, in order."""

    def __init__(self, proc_id: str, channel_closed: asyncio.Event,
                 grant: Callable[[str, int], None]) -> None:
        self.proc_id = proc_id
        self.queue: asyncio.Queue[ProcEvent] = _ConsumedQueue(self._taken)
        self.closed = False
        self._channel_closed = channel_closed
        self._grant = grant
        self._consumed = 0

    def _taken(self, event: ProcEvent) -> None:
        self._consumed += event.size
        if self._consumed >= _GRANT_STEP:
            self._grant(self.proc_id, self._consumed)
            self._consumed = 0

    def put(self, event: ProcEvent) -> None:
        if not self.closed:
            self.queue.put_nowait(event)

    async def next(self, timeout: float | None = None) -> ProcEvent | None:
        """The next event, or None when ``timeout`` seconds pass first. After the channel
        closed and everything queued was read: a ``closed`` event."""
        if not self.queue.empty():
            return self.queue.get_nowait()
        if self._channel_closed.is_set():
            return ProcEvent("closed")
        getter = asyncio.ensure_future(self.queue.get())
        closer = asyncio.ensure_future(self._channel_closed.wait())
        try:
            done, _ = await asyncio.wait(
                {getter, closer},
                timeout=None if timeout is None else max(0.0, timeout),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            closer.cancel()
            if not getter.done():
                getter.cancel()
        if getter in done:
            return getter.result()
        if closer in done:
            return ProcEvent("closed")
        return None

    def pending(self) -> list[ProcEvent]:
        events = []
        while not self.queue.empty():
            events.append(self.queue.get_nowait())
        return events

    def close(self) -> None:
        """Later events are dropped (a process still attached then waits for credit until it
        is killed, detached or exits)."""
        self.closed = True
        self.queue = asyncio.Queue()  # drop what is queued, without granting credit for it


ExitListener = Callable[[dict[str, Any]], None]


class RunnerChannel:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._next_rid = 0
        self._pending: dict[int, asyncio.Future[tuple[dict[str, Any], bytes]]] = {}
        self._streams: dict[str, ProcStream] = {}
        self._exit_listeners: list[ExitListener] = []
        self._write_lock = asyncio.Lock()
        self._closed = asyncio.Event()
        self._grants: set[asyncio.Task[dict[str, Any]]] = set()
        self.close_reason = ""
        self._reader_task = asyncio.create_task(self._read_loop())

    @classmethod
    async def connect(cls, socket_path: str, timeout: float = 15.0) -> RunnerChannel:
        """Connect, retrying while the runner starts up; then check it answers."""
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(socket_path, limit=1 << 20)
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if time.monotonic() > deadline:
                    raise ChannelClosed(f"runner did not start: {exc}") from exc
                await asyncio.sleep(delay)
                # Short steps: every millisecond here is session start latency.
                delay = min(delay * 2, 0.01)
        channel = cls(reader, writer)
        await channel.call("ping")
        return channel

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def add_exit_listener(self, listener: ExitListener) -> None:
        self._exit_listeners.append(listener)

    async def call(
        self, op: str, body: bytes = b"", timeout: float | None = None, **fields: Any
    ) -> dict[str, Any]:
        header, _ = await self.call_with_body(op, body, timeout=timeout, **fields)
        return header

    async def call_with_body(
        self, op: str, body: bytes = b"", timeout: float | None = None, **fields: Any
    ) -> tuple[dict[str, Any], bytes]:
        if self.closed:
            raise ChannelClosed(self.close_reason or "runner connection closed")
        if op in ("spawn", "attach") and fields.get("attach", True):
            fields.setdefault("credit", STREAM_CREDIT)
        self._next_rid += 1
        rid = self._next_rid
        future: asyncio.Future[tuple[dict[str, Any], bytes]] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending[rid] = future
        try:
            async with self._write_lock:
                self._writer.writelines(encode_frame({"op": op, "rid": rid, **fields}, body))
                await self._writer.drain()
            header, reply_body = await asyncio.wait_for(future, timeout)
        except (ConnectionError, RuntimeError) as exc:
            raise ChannelClosed(str(exc) or "runner connection closed") from exc
        finally:
            self._pending.pop(rid, None)
        if not header.get("ok"):
            raise RunnerCallError(
                str(header.get("error", "runner error")), str(header.get("errno"))
            )
        return header, reply_body

    def _grant(self, proc_id: str, nbytes: int) -> None:
        """Tell the runner a subscriber consumed ``nbytes`` of a process's output."""
        if self.closed:
            return
        task = asyncio.ensure_future(self.call("credit", id=proc_id, bytes=nbytes))
        self._grants.add(task)
        task.add_done_callback(self._grant_done)

    def _grant_done(self, task: asyncio.Task[dict[str, Any]]) -> None:
        self._grants.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a lost grant only matters if the channel is gone

    @contextlib.asynccontextmanager
    async def subscribe(self, proc_id: str) -> AsyncIterator[ProcStream]:
        stream = ProcStream(proc_id, self._closed, self._grant)
        self._streams[proc_id] = stream
        try:
            yield stream
        finally:
            if self._streams.get(proc_id) is stream:
                del self._streams[proc_id]
            stream.close()

    async def _read_loop(self) -> None:
        reason = "runner connection closed"
        try:
            while True:
                prefix = await self._reader.readexactly(FRAME_PREFIX.size)
                head_len, body_len = FRAME_PREFIX.unpack(prefix)
                if head_len > MAX_HEADER or body_len > MAX_BODY:
                    raise ValueError("oversized frame from runner")
                header = json.loads(await self._reader.readexactly(head_len))
                body = await self._reader.readexactly(body_len) if body_len else b""
                await self._dispatch(header, body)
        except asyncio.IncompleteReadError:
            reason = "the sandbox runner went away"
        except (ConnectionError, ValueError) as exc:
            reason = f"runner connection failed: {exc}"
        except asyncio.CancelledError:
            reason = "runner connection closed"
        finally:
            self.close_reason = reason
            self._closed.set()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ChannelClosed(reason))
            self._writer.close()

    async def _dispatch(self, header: dict[str, Any], body: bytes) -> None:
        # Never blocks: flow control bounds what each stream holds.
        event = header.get("ev")
        if event is None:
            future = self._pending.get(header.get("rid", -1))
            if future is not None and not future.done():
                future.set_result((header, body))
            return
        proc_id = str(header.get("id"))
        stream = self._streams.get(proc_id)
        if event == "out":
            if stream is not None:
                stream.put(ProcEvent("out", body.decode("utf-8", "replace"), size=len(body)))
        elif event == "exit":
            if stream is not None and header.get("delivered"):
                stream.put(ProcEvent("exit", info=header))
            for listener in list(self._exit_listeners):
                with contextlib.suppress(Exception):
                    listener(header)

    async def close(self) -> None:
        self._reader_task.cancel()
        with contextlib.suppress(BaseException):
            await self._reader_task

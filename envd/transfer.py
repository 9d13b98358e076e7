"""Moving tar streams into and out of a session's sandbox (UploadFiles / DownloadFiles).

The daemon only relays bytes: the runner's transfer helper unpacks and packs inside the sandbox,
as the sandbox user, so the host never follows a path that sandboxed code controls. Archive data
goes to the runner in chunks well below its frame limit, one at a time (backpressure all the way
to the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from collections.abc import AsyncGenerator, AsyncIterable, Iterator
from dataclasses import dataclass

from envd.channel import ChannelClosed, RunnerCallError
from envd.errors import (
    EnvdError,
    FailedPrecondition,
    InvalidArgument,
    PathNotFound,
    PermissionDeniedError,
    SandboxUnavailable,
    TooLarge,
)
from envd.sessions.session import Session

CHUNK = 1 << 20


@dataclass
class UploadResult:
    destination: str  # absolute, in the sandbox
    entries: int
    bytes: int


def sandbox_path(session: Session, raw: str, what: str) -> str:
    """A request path as an absolute sandbox path: relative ones resolve against the workspace,
    empty means the workspace."""
    if "\0" in raw:
        raise InvalidArgument(f"{what} cannot contain NUL characters")
    return posixpath.normpath(posixpath.join(session.handle.workspace, raw))


def _error(exc: RunnerCallError, missing_is: type[EnvdError]) -> EnvdError:
    message = str(exc)
    if exc.code == "EINVAL":
        return InvalidArgument(f"archive refused: {message}")
    if exc.code in ("ENOENT", "ENOTDIR"):
        return missing_is(message)
    if exc.code in ("EFBIG", "ENOSPC", "EDQUOT"):
        return TooLarge(message)
    if exc.code in ("EACCES", "EPERM", "EROFS"):
        return PermissionDeniedError(f"the sandbox user may not do this: {message}")
    return FailedPrecondition(message)


@contextlib.contextmanager
def _runner_errors(missing_is: type[EnvdError]) -> Iterator[None]:
    try:
        yield
    except RunnerCallError as exc:
        raise _error(exc, missing_is) from None
    except ChannelClosed as exc:
        raise SandboxUnavailable(f"the sandbox is unreachable: {exc}") from None


async def upload(
    session: Session, destination: str, chunks: AsyncIterable[bytes], max_bytes: int
) -> UploadResult:
    """Unpack a tar stream into ``destination`` (a directory, created when missing). All or
    nothing: a refused archive or an interrupted upload leaves the sandbox unchanged."""
    dest = sandbox_path(session, destination, "destination")
    limit = max_bytes if max_bytes > 0 else 0
    channel = session.channel
    session.touch()
    with _runner_errors(FailedPrecondition):
        reply = await channel.call("untar_begin", dest=dest, max_bytes=limit)
        tid = reply["id"]
        finished = False
        received = 0
        try:
            async for data in chunks:
                received += len(data)
                if limit and received > limit:
                    raise TooLarge(f"the upload exceeds the limit of {limit} bytes")
                for start in range(0, len(data), CHUNK):
                    await channel.call("untar_chunk", data[start:start + CHUNK], id=tid)
                session.touch()
            result = await channel.call("untar_end", id=tid)
            finished = True
        finally:
            if not finished:
                # The helper removes its temporary directory; the destination is untouched.
                with contextlib.suppress(RunnerCallError, ChannelClosed):
                    await asyncio.shield(channel.call("untar_abort", id=tid))
    session.touch()
    return UploadResult(str(result.get("destination", dest)), int(result.get("entries", 0)),
                        received)


async def download(session: Session, path: str) -> AsyncGenerator[tuple[bytes, int], None]:
    """A tar stream of ``path`` (file or directory) rooted at its base name, as
    ``(chunk, size_hint)`` pairs; the hint (an estimate of the total) is set on the first."""
    source = sandbox_path(session, path, "path")
    channel = session.channel
    session.touch()
    with _runner_errors(PathNotFound):
        reply = await channel.call("tar_begin", path=source)
        tid = reply["id"]
        hint = int(reply.get("size_hint", 0))
        finished = False
        try:
            while True:
                header, data = await channel.call_with_body("tar_read", id=tid, max_bytes=CHUNK)
                if header.get("eof"):
                    finished = True
                    break
                yield data, hint
                hint = 0
                session.touch()
        finally:
            if not finished:
                with contextlib.suppress(RunnerCallError, ChannelClosed):
                    await asyncio.shield(channel.call("tar_close", id=tid))

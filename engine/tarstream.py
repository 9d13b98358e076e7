"""Tar streams of local files for :class:`engine.client.EnvdClient` transfers.

Uploads are packed in a thread and streamed as they are produced (bounded memory, however large
the tree); downloads are unpacked with the same all-or-nothing, never-follow-a-symlink unpacker
the sandbox uses (:mod:`envd.runner.transfer`): archive content comes from sandboxed code and is
not trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tarfile
import tempfile
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable
from pathlib import Path
from typing import IO, Any, cast

from envd.runner import transfer

CHUNK = 1 << 20
# Downloads are kept in memory up to this size, then in a temporary file.
SPOOL_BYTES = 32 << 20

# (bytes so far, expected total or 0 when unknown)
Progress = Callable[[int, int], None]


class _Stopped(Exception):
    """The consumer went away; the packing thread stops."""


def size_hint(path: Path) -> int:
    """Roughly the size of the archive of ``path``: a total for progress bars."""
    return transfer.size_hint(str(path))


async def tar_chunks(path: Path, arcname: str | None = None) -> AsyncIterator[bytes]:
    """A tar stream of ``path`` (symlinks kept as links) in chunks of about 1 MiB, rooted at
    its base name, or at ``arcname`` ("." for a directory's contents)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=4)
    stop = threading.Event()

    def put(item: bytes | BaseException | None) -> None:
        future = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
        while True:
            try:
                future.result(timeout=0.1)
                return
            except TimeoutError:
                if stop.is_set():
                    future.cancel()
                    raise _Stopped from None

    class Writer:
        """Collects tarfile's 10 KiB records into chunks."""

        def __init__(self) -> None:
            self.buffer = bytearray()

        def write(self, data: bytes) -> int:
            self.buffer += data
            while len(self.buffer) >= CHUNK:
                put(bytes(self.buffer[:CHUNK]))
                del self.buffer[:CHUNK]
            return len(data)

    def produce() -> None:
        try:
            writer = Writer()
            transfer.pack(str(path), cast(IO[bytes], writer), arcname)
            if writer.buffer:
                put(bytes(writer.buffer))
            put(None)
        except _Stopped:
            pass
        except BaseException as exc:  # handed to the consumer
            with contextlib.suppress(_Stopped):
                put(exc)

    thread = threading.Thread(target=produce, name="envd-tar", daemon=True)
    thread.start()
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


async def counted(
    chunks: AsyncIterable[bytes], progress: Progress | None, total: int
) -> AsyncIterator[bytes]:
    done = 0
    async for chunk in chunks:
        done += len(chunk)
        if progress is not None:
            progress(done, max(total, done))
        yield chunk


def _top_name(spool: IO[bytes]) -> str:
    """The name of the archive's first entry (the downloaded file or directory)."""
    spool.seek(0)
    with tarfile.open(fileobj=spool, mode="r:") as tar:
        first = tar.next()
    spool.seek(0)
    if first is None:
        raise ValueError("the server sent an empty archive")
    return transfer.entry_parts(first.name)[0] if transfer.entry_parts(first.name) else "."


async def unpack_chunks(
    chunks: AsyncIterable[tuple[bytes, int]], local_dir: Path, progress: Progress | None = None
) -> Path:
    """Unpack a downloaded stream of ``(chunk, size_hint)`` into ``local_dir`` (created when
    missing), all or nothing; returns the path of the top entry."""
    spool: Any = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - closed below
    try:
        done = total = 0
        async for data, hint in chunks:
            total = hint or total
            spool.write(data)
            done += len(data)
            if progress is not None:
                progress(done, max(total, done))
        if progress is not None:
            progress(done, done)
        name = await asyncio.to_thread(_top_name, spool)
        await asyncio.to_thread(transfer.unpack, spool, os.fspath(local_dir))
    finally:
        spool.close()
    return local_dir / name

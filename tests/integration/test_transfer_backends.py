"""envd.transfer on every backend: tar streams in and out through the runner's helper."""

from __future__ import annotations

import io
import tarfile

import pytest

from envd import transfer
from envd.environment import SandboxEnvironment
from envd.errors import InvalidArgument, PathNotFound, TooLarge

pytestmark = pytest.mark.anyio


def small_tar(*names: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size, info.mode = 3, 0o750
            tar.addfile(info, io.BytesIO(b"abc"))
    return buffer.getvalue()


async def chunks(data: bytes, size: int = 1000):  # type: ignore[no-untyped-def]
    for start in range(0, len(data), size):
        yield data[start:start + size]


async def test_upload_download_and_refusals(sandbox_env: SandboxEnvironment) -> None:
    session = sandbox_env.session
    result = await transfer.upload(session, "in", chunks(small_tar("a/b.txt", "c.txt")), 0)
    assert result.entries == 2 and result.destination.endswith("/in")

    data = b"".join([chunk async for chunk, _hint in transfer.download(session, "in")])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["in", "in/a", "in/a/b.txt", "in/c.txt"]
    assert members["in/c.txt"].mode == 0o750

    with pytest.raises(InvalidArgument, match="leaves the destination"):
        await transfer.upload(session, "in", chunks(small_tar("ok.txt", "../x")), 0)
    with pytest.raises(TooLarge):
        await transfer.upload(session, "in", chunks(small_tar("big.txt") * 2), 5000)
    with pytest.raises(PathNotFound):
        async for _ in transfer.download(session, "missing"):
            pass
    again = b"".join([chunk async for chunk, _hint in transfer.download(session, "in")])
    with tarfile.open(fileobj=io.BytesIO(again)) as tar:
        assert sorted(tar.getnames()) == ["in", "in/a", "in/a/b.txt", "in/c.txt"]

"""UploadFiles / DownloadFiles over real gRPC into a real Docker sandbox."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from engine.remote import RemoteEnvironment
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio
BIG = 50 * 1024 * 1024


def make_tree(root: Path) -> Path:
    tree = root / "tree"
    (tree / "src" / "pkg" / "deep").mkdir(parents=True)
    (tree / "empty").mkdir()
    (tree / "src" / "pkg" / "deep" / "data.txt").write_text("nested\n")
    (tree / "src" / "pkg" / "__init__.py").write_text("")
    run = tree / "run.sh"
    run.write_text("#!/bin/sh\necho ran\n")
    run.chmod(0o755)
    (tree / "readonly.txt").write_text("keep me\n")
    (tree / "readonly.txt").chmod(0o444)
    (tree / "link").symlink_to("src/pkg/deep/data.txt")
    (tree / "outside").symlink_to("/etc/hostname")
    block = hashlib.sha256(b"envd").digest() * (1 << 15)  # 1 MiB, not all zeros
    with open(tree / "big.bin", "wb") as handle:
        for i in range(BIG // len(block)):
            handle.write(i.to_bytes(4, "big") + block[4:])
    return tree


def snapshot(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry below ``root``: kind, permission bits, and content digest or link target."""
    found: dict[str, tuple[str, int, str]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            found[rel] = ("link", 0, os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            found[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
        else:
            found[rel] = ("file", stat.S_IMODE(st.st_mode),
                          hashlib.sha256(path.read_bytes()).hexdigest())
    return found


async def sh(env: RemoteEnvironment, cmd: str) -> str:
    result = await call_tool(env, "exec_command", {"cmd": cmd})
    assert result.stop_reason == "completed", result.output
    return result.output


async def test_round_trip_keeps_bytes_modes_and_symlinks(
    remote_env: RemoteEnvironment, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path)
    client, sid = remote_env.client, remote_env.session_id
    seen: list[tuple[int, int]] = []
    reply = await client.upload_path(sid, tree, "incoming",
                                     progress=lambda done, total: seen.append((done, total)))
    assert reply.destination == "/workspace/incoming"
    assert reply.entries == len(snapshot(tree)) + 1  # the top directory too
    assert seen and seen[-1][0] == seen[-1][1] and seen[-1][0] > BIG

    # Inside the sandbox: owned by the sandbox user, modes and links as they were.
    listing = await sh(remote_env, "cd incoming/tree && stat -c '%U %a %F %N' run.sh link big.bin")
    lines = listing.splitlines()
    assert lines[0].startswith("sandbox 755 regular file")
    assert "symbolic link" in lines[1] and "src/pkg/deep/data.txt" in lines[1]
    assert lines[2].startswith("sandbox 644 regular file")
    assert await sh(remote_env, "incoming/tree/run.sh") == "ran\n"
    assert await sh(remote_env, "ls -A incoming") == "tree\n"  # no temporary directory left

    out = tmp_path / "out"
    got = await client.download_to(sid, "incoming/tree", out)
    assert got == out / "tree"
    assert snapshot(got) == snapshot(tree)
    assert (got / "link").is_symlink() and os.readlink(got / "outside") == "/etc/hostname"

    # A single file comes back as itself.
    single = await client.download_to(sid, "/workspace/incoming/tree/run.sh", tmp_path / "one")
    assert single.read_text() == "#!/bin/sh\necho ran\n"
    assert stat.S_IMODE(single.stat().st_mode) == 0o755


async def test_contents_upload_and_raw_streams(
    remote_env: RemoteEnvironment, tmp_path: Path
) -> None:
    client, sid = remote_env.client, remote_env.session_id
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.txt").write_text("x\n")
    await client.upload_path(sid, tmp_path / "d", "", contents=True)
    assert await sh(remote_env, "cat x.txt") == "x\n"

    # The raw stream API: any tar bytes in, a tar stream out.
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("raw/hello.txt")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"hello\n"))
    reply = await client.upload(sid, [buffer.getvalue()], "nested/dir")
    assert reply.destination == "/workspace/nested/dir" and reply.entries == 1
    data = b"".join([chunk async for chunk in client.download(sid, "nested")])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getnames() == ["nested", "nested/dir", "nested/dir/raw",
                                  "nested/dir/raw/hello.txt"]


def evil_tar(*names: str, symlink: tuple[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        good = tarfile.TarInfo("good.txt")
        good.size = 3
        tar.addfile(good, io.BytesIO(b"ok\n"))
        if symlink is not None:
            link = tarfile.TarInfo(symlink[0])
            link.type = tarfile.SYMTYPE
            link.linkname = symlink[1]
            tar.addfile(link)
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 5
            tar.addfile(info, io.BytesIO(b"evil\n"))
    return buffer.getvalue()


@pytest.mark.parametrize(("archive", "message"), [
    (evil_tar("../evil"), "leaves the destination"),
    (evil_tar("/tmp/evil"), "absolute path"),
    (evil_tar("sub/../../evil"), "leaves the destination"),
    (evil_tar("esc/evil", symlink=("esc", "/tmp")), "symlink"),
    (evil_tar("esc/evil", symlink=("esc", "..")), "symlink"),
    (b"this is not a tar archive" * 100, "not a valid tar archive"),
])
async def test_unsafe_archives_are_refused_whole(
    remote_env: RemoteEnvironment, archive: bytes, message: str
) -> None:
    client, sid = remote_env.client, remote_env.session_id
    await sh(remote_env, "mkdir -p keep && echo old > keep/file")
    listing = "find /workspace /tmp / -maxdepth 1 -printf '%M %u %s %p %l\\n'; " \
        "find /workspace -printf '%M %u %s %T@ %p %l\\n' | sort"
    before = await sh(remote_env, listing)
    for dest in ("", "keep"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.upload(sid, [archive], dest)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in str(caught.value.details())
    after = await sh(remote_env, listing)
    assert after == before


async def test_transfer_errors_are_status_codes(remote_env: RemoteEnvironment) -> None:
    client, sid = remote_env.client, remote_env.session_id
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await client.download_to(sid, "no/such/thing", "/nonexistent-envd-test")
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no/such/thing" in str(missing.value.details())
    await sh(remote_env, "echo f > plain")
    with pytest.raises(grpc.aio.AioRpcError) as onto_file:
        await client.upload(sid, [evil_tar()], "plain")
    assert onto_file.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await client.upload("s-00000000000000000000", [evil_tar()], "")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await client.upload(sid, [evil_tar()], "/etc")
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_interrupted_upload_leaves_nothing(
    remote_env: RemoteEnvironment, tmp_path: Path
) -> None:
    client, sid = remote_env.client, remote_env.session_id
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(8 << 20))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(big, arcname="big.bin")
    archive = buffer.getvalue()

    async def cut_short() -> AsyncIterator[bytes]:
        yield archive[: 3 << 20]
        await asyncio.sleep(0.5)  # the unpacker is mid-file now
        raise RuntimeError("the client gave up")

    with pytest.raises((RuntimeError, grpc.aio.AioRpcError)):
        await client.upload(sid, cut_short(), "")
    for _ in range(100):
        if await sh(remote_env, "ls -A /workspace") == "[no output]":
            break
        await asyncio.sleep(0.1)
    assert await sh(remote_env, "ls -A /workspace") == "[no output]"

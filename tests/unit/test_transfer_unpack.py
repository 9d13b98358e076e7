"""The all-or-nothing unpacker shared by the sandbox (uploads) and the client (downloads)."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from envd.runner import transfer


def archive(*entries: tuple[str, str, object], fmt: int = tarfile.PAX_FORMAT) -> io.BytesIO:
    """(name, kind, extra): kind "file" (extra: bytes), "dir" (extra: mode), "sym" / "hard"
    (extra: target), "fifo", "chr"."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, kind, extra in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(extra, bytes)
                info.size = len(extra)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(extra))
                continue
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, int(extra)  # type: ignore[call-overload]
            elif kind in ("sym", "hard"):
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = str(extra)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
            tar.addfile(info)
    buffer.seek(0)
    return buffer


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(("entries", "message"), [
    ([("../evil", "file", b"x")], "leaves the destination"),
    ([("a/../../evil", "file", b"x")], "leaves the destination"),
    ([("/etc/evil", "file", b"x")], "absolute path"),
    ([("fifo", "fifo", None)], "FIFO"),
    ([("null", "chr", None)], "device"),
    ([("h", "hard", "/etc/passwd")], "hard link"),
    ([("h", "hard", "../outside")], "hard link"),
    ([("h", "hard", "missing")], "hard link"),
    ([("l", "sym", "/etc"), ("l/evil", "file", b"x")], "symlink"),
    ([("l", "sym", "../.."), ("l/evil", "file", b"x")], "symlink"),
    ([("f", "file", b"x"), ("f/evil", "file", b"x")], "symlink or a file"),
    ([("d", "dir", 0o755), ("d", "file", b"x")], "replace a directory"),
])
def test_unsafe_entries_are_refused_and_nothing_changes(
    tmp_path: Path, entries: list[tuple[str, str, object]], message: str
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    before = os.stat(dest)
    good = [("good.txt", "file", b"ok"), ("sub/deep.txt", "file", b"ok")]
    with pytest.raises(transfer.Refused, match=message):
        transfer.unpack(archive(*good, *entries), str(dest))
    assert listing(tmp_path) == ["dest", "dest/old.txt"]
    assert os.stat(dest).st_mtime_ns == before.st_mtime_ns


def test_modes_links_and_merging(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "keep").mkdir(parents=True)
    (dest / "keep" / "mine.txt").write_text("mine")
    (dest / "keep" / "replaced.txt").write_text("before")
    result = transfer.unpack(archive(
        ("ro", "dir", 0o555),
        ("ro/inside.txt", "file", b"in a read-only directory"),
        ("keep/replaced.txt", "file", b"after"),
        ("keep/new.txt", "file", b"new"),
        ("keep/twin", "hard", "keep/new.txt"),
        ("abs", "sym", "/etc/hostname"),
        ("rel", "sym", "keep/new.txt"),
        ("implicit/parent/file", "file", b"x"),
    ), str(dest))
    assert result["entries"] == 8 and result["destination"] == str(dest)
    assert (dest / "keep" / "mine.txt").read_text() == "mine"
    assert (dest / "keep" / "replaced.txt").read_text() == "after"
    assert os.stat(dest / "keep" / "twin").st_ino == os.stat(dest / "keep" / "new.txt").st_ino
    assert os.readlink(dest / "abs") == "/etc/hostname"
    assert (dest / "rel").read_text() == "new"
    assert stat.S_IMODE(os.stat(dest / "ro").st_mode) == 0o555
    assert (dest / "ro" / "inside.txt").read_bytes() == b"in a read-only directory"
    assert not [p for p in os.listdir(dest) if p.startswith(transfer.TMP_PREFIX)]


def test_conflicts_and_limits(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "name").mkdir(parents=True)
    with pytest.raises(transfer.Conflict, match="has a directory"):
        transfer.unpack(archive(("name", "file", b"x")), str(dest))
    (tmp_path / "file").write_text("x")
    with pytest.raises(transfer.Conflict, match="is a file"):
        transfer.unpack(archive(("a", "file", b"x")), str(tmp_path / "file"))
    with pytest.raises(transfer.TooLarge):
        transfer.unpack(archive(("a", "file", b"x" * 100)), str(dest), max_bytes=99)
    with pytest.raises(transfer.Refused, match="not a valid tar archive"):
        transfer.unpack(io.BytesIO(b"nonsense" * 200), str(dest))
    assert listing(dest) == ["name"]


def test_pack_round_trip_skips_fifos(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "x").write_text("x")
    os.mkfifo(src / "pipe")
    buffer = io.BytesIO()
    transfer.pack(str(src), buffer)
    assert transfer.size_hint(str(src)) >= len(buffer.getvalue()) - 10240
    buffer.seek(0)
    transfer.unpack(buffer, str(tmp_path / "out"))
    assert listing(tmp_path / "out") == ["src", "src/x"]

"""The session scratchpad: where the full text of truncated tool output is archived.

The daemon writes archives on the host, into a directory the sandbox sees read-only, so
sandboxed code can read an archive (``cat <path>``, ``read_file <path>``) but never rewrite it
or plant a symlink the daemon would follow. Each session has a byte quota so that an endless
output cannot fill the disk.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

ARCHIVE_DIR = "truncated-tool-output"
ARCHIVE_CAP = 8 * 1024 * 1024 - 1
MIDDLE_MARK = b"\n[archive middle truncated]\n"
_HEAD_MAX = (ARCHIVE_CAP - len(MIDDLE_MARK)) // 2
_TAIL_MAX = ARCHIVE_CAP - len(MIDDLE_MARK) - _HEAD_MAX
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


class QuotaExceeded(OSError):
    def __init__(self, quota: int) -> None:
        super().__init__(errno.EDQUOT, f"scratchpad quota of {quota} bytes reached")
        self.quota = quota


@dataclass
class Scratchpad:
    """One session's scratchpad: ``host_dir`` as the daemon writes it, ``model_dir`` as the
    model spells it (the same place, seen from inside the sandbox)."""

    host_dir: Path
    model_dir: str
    quota_bytes: int = 0  # <= 0: unlimited
    used_bytes: int = field(default=0)

    def reserve(self, nbytes: int) -> None:
        if self.quota_bytes > 0 and self.used_bytes + nbytes > self.quota_bytes:
            raise QuotaExceeded(self.quota_bytes)
        self.used_bytes += nbytes

    def release(self, nbytes: int) -> None:
        self.used_bytes = max(0, self.used_bytes - nbytes)

    def measure(self) -> int:
        """Recount the bytes in use from disk (after a restart)."""
        total = 0
        for root, _dirs, files in os.walk(self.host_dir):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_size
        self.used_bytes = total
        return total


def archive_name(tool_name: str, tool_call_id: str) -> str:
    safe = _UNSAFE.sub("_", tool_name)[:48]
    digest = hashlib.sha256(tool_call_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{safe}-{digest}.log"


def _utf8_head_len(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a character."""
    end = len(data)
    back = 0
    while back < min(3, end) and (data[end - 1 - back] & 0xC0) == 0x80:
        back += 1
    if back < end:
        lead = data[end - 1 - back]
        need = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4
        if need != back + 1:
            return end - 1 - back
    return end


def _utf8_tail_start(data: bytes) -> int:
    start = 0
    while start < len(data) and start < 4 and (data[start] & 0xC0) == 0x80:
        start += 1
    return start


class OutputArchive:
    """The full text of one truncated call, written as it streams.

    Past :data:`ARCHIVE_CAP` bytes the file keeps a head and a tail half around
    ``[archive middle truncated]``, both cut on character boundaries. Any failure (including
    the quota) stops the archive and is reported by :meth:`close` as a note; it never fails the
    call."""

    def __init__(self, scratchpad: Scratchpad | None, tool_name: str, tool_call_id: str) -> None:
        self.scratchpad = scratchpad
        self.name = archive_name(tool_name, tool_call_id)
        self._fd = -1
        self._written = 0
        self._tail: bytearray | None = None
        self._error: str | None = None
        self._opened = False

    @property
    def model_path(self) -> str:
        assert self.scratchpad is not None
        return f"{self.scratchpad.model_dir.rstrip('/')}/{ARCHIVE_DIR}/{self.name}"

    def _open(self) -> None:
        self._opened = True
        if self.scratchpad is None:
            raise OSError(errno.ENOENT, "this session has no scratchpad")
        directory = self.scratchpad.host_dir / ARCHIVE_DIR
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        # Readable by the sandbox user (who reads it back), writable by nobody inside.
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        self._fd = os.open(directory / self.name, flags, 0o644)

    def write(self, text: str) -> None:
        if self._error is not None or not text:
            return
        try:
            if not self._opened:
                self._open()
            self._append(text.encode("utf-8", "surrogatepass"))
        except OSError as exc:
            self._fail(exc)

    def _append(self, data: bytes) -> None:
        assert self.scratchpad is not None
        if self._tail is not None:
            self._tail += data
            if len(self._tail) > 2 * _TAIL_MAX:
                del self._tail[: len(self._tail) - _TAIL_MAX]
            return
        if self._written + len(data) <= ARCHIVE_CAP:
            self.scratchpad.reserve(len(data))
            os.write(self._fd, data)
            self._written += len(data)
            return
        # Over the cap from here on: keep the head on disk, the tail in memory.
        if len(data) >= _TAIL_MAX:
            tail = bytes(data[-_TAIL_MAX:])
        else:
            need = _TAIL_MAX - len(data)
            tail = os.pread(self._fd, need, self._written - need) + data
        if self._written < _HEAD_MAX:
            piece = data[: _HEAD_MAX - self._written]
            self.scratchpad.reserve(len(piece))
            os.write(self._fd, piece)
            self._written += len(piece)
        else:
            os.ftruncate(self._fd, _HEAD_MAX)
            self.scratchpad.release(self._written - _HEAD_MAX)
            self._written = _HEAD_MAX
        self._tail = bytearray(tail)

    def _fail(self, exc: OSError) -> None:
        """Stop archiving: a partial archive would mislead, so it is removed."""
        if isinstance(exc, QuotaExceeded):
            self._error = exc.strerror
        else:
            self._error = errno.errorcode.get(exc.errno or 0, "EIO")
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            assert self.scratchpad is not None
            with contextlib.suppress(OSError):
                os.unlink(self.scratchpad.host_dir / ARCHIVE_DIR / self.name)
            self.scratchpad.release(self._written)
            self._written = 0

    def close(self) -> str:
        """Finish the file; return the note the model sees."""
        if self._error is None and not self._opened:
            try:
                self._open()
            except OSError as exc:
                self._fail(exc)
        try:
            if self._error is None and self._tail is not None:
                assert self.scratchpad is not None
                head = os.pread(self._fd, 4, max(0, self._written - 4))
                cut = len(head) - _utf8_head_len(head)
                tail = bytes(self._tail[-_TAIL_MAX:])
                tail = tail[_utf8_tail_start(tail) :]
                os.ftruncate(self._fd, self._written - cut)
                self.scratchpad.release(cut)
                self.scratchpad.reserve(len(MIDDLE_MARK) + len(tail))
                os.pwrite(self._fd, MIDDLE_MARK + tail, self._written - cut)
        except OSError as exc:
            self._fail(exc)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._error is not None:
            return f"[output archive failed: {self._error}]"
        if self._tail is not None:
            return f"[output archived (8 MiB limit; head and tail kept): {self.model_path}]"
        return f"[output archived: {self.model_path}]"

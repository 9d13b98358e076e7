#!/usr/bin/env python3
"""Tar streams into and out of a directory, safely: the sandbox side of UploadFiles and
DownloadFiles. Standard library only.

The runner starts this file as a separate process with the sandbox user's real uid, so it can do
nothing sandboxed code could not do itself, and the runner's event loop never blocks on disk
work. envd's client reuses :func:`unpack` to extract downloads on the caller's machine.

    transfer.py untar DEST MAX_BYTES  < tar   one JSON line on stdout: {"ok", ...} or an error
    transfer.py tar PATH              > tar   first a {"size_hint": N} line; errors on stderr

Unpacking is all or nothing: entries go to a temporary directory beside the destination (same
file system), every entry is checked (no absolute names, no "..", no devices or FIFOs, hard
links only to files of the archive), and nothing moves into place until the whole archive was
read. Every path is walked one component at a time with O_NOFOLLOW from a directory descriptor,
so no symlink is followed while extracting, including symlinks the archive itself created;
symlinks are kept as they are, wherever they point.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import stat
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

COPY_CHUNK = 1 << 20
TMP_PREFIX = ".envd-upload-"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """The archive or the destination is not acceptable; nothing was changed."""

    code = "EINVAL"


class TooLarge(Refused):
    code = "EFBIG"


class Conflict(Refused):
    code = "EEXIST"


class Aborted(Exception):
    code = "ECANCELED"


Parts = tuple[str, ...]


def entry_parts(name: str) -> Parts:
    """The components of an archive name, refusing names that leave the destination."""
    if "\0" in name:
        raise Refused(f"entry {name[:200]!r} contains a NUL character")
    if name.startswith("/"):
        raise Refused(f"entry {name[:200]!r} is an absolute path")
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if ".." in parts:
        raise Refused(f'entry {name[:200]!r} leaves the destination (it contains "..")')
    return parts


def _show(parts: Parts) -> str:
    return repr("/".join(parts)[:200])


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class _Extractor:
    def __init__(self, root_fd: int, max_bytes: int | None) -> None:
        self.root_fd = root_fd
        self.max_bytes = max_bytes
        self.total = 0
        self.entries = 0
        self.files: set[Parts] = set()
        # Explicit directory entries: their mode and mtime are applied once everything is in
        # place (a read-only directory must stay writable while it is being filled).
        self.dirs: dict[Parts, tuple[int, float]] = {}
        # Parents the archive does not list get the usual default mode at once.
        self.implicit_mode = (0o777 & ~_umask()) | 0o700

    @contextlib.contextmanager
    def parent(self, parts: Parts, create: bool = True) -> Iterator[int]:
        """A descriptor of the directory holding ``parts``, reached without following links."""
        fd = os.dup(self.root_fd)
        try:
            for depth, name in enumerate(parts[:-1]):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(name, self.implicit_mode, dir_fd=fd)
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise Refused(
                            f"entry {_show(parts)} lies beneath {_show(parts[:depth + 1])}, "
                            "which the archive made a symlink or a file"
                        ) from None
                    raise
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def clear(self, fd: int, name: str, parts: Parts) -> None:
        """Make room for a non-directory entry (a later duplicate replaces an earlier one)."""
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise Refused(f"entry {_show(parts)} would replace a directory of the archive")
        os.unlink(name, dir_fd=fd)
        self.files.discard(parts)

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        parts = entry_parts(member.name)
        if not parts:
            if member.isdir():
                return  # "./": the destination itself, which keeps its own mode
            raise Refused(f"entry {member.name[:200]!r} has no file name")
        if member.ischr() or member.isblk():
            raise Refused(f"entry {_show(parts)} is a device")
        if member.isfifo():
            raise Refused(f"entry {_show(parts)} is a FIFO")
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            raise Refused(f"entry {_show(parts)} has an unsupported type")
        if member.isreg():
            self.total += member.size
            if self.max_bytes is not None and self.total > self.max_bytes:
                raise TooLarge(f"the archive unpacks to more than {self.max_bytes} bytes")
        self.entries += 1
        name = parts[-1]
        with self.parent(parts) as fd:
            if member.isdir():
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode):
                        raise Refused(
                            f"entry {_show(parts)} would replace a file of the archive"
                        ) from None
                self.dirs[parts] = (member.mode & 0o1777, member.mtime)
            elif member.issym():
                self.clear(fd, name, parts)
                os.symlink(member.linkname, name, dir_fd=fd)
                with contextlib.suppress(OSError, NotImplementedError):
                    os.utime(name, (member.mtime, member.mtime), dir_fd=fd,
                             follow_symlinks=False)
            elif member.islnk():
                try:
                    target = entry_parts(member.linkname)
                except Refused:
                    target = ()
                if target not in self.files:
                    raise Refused(
                        f"entry {_show(parts)} is a hard link to {member.linkname[:200]!r}, "
                        "which is not a file of the archive"
                    )
                self.clear(fd, name, parts)
                with self.parent(target, create=False) as target_fd:
                    os.link(target[-1], name, src_dir_fd=target_fd, dst_dir_fd=fd,
                            follow_symlinks=False)
                self.files.add(parts)
            else:
                self.clear(fd, name, parts)
                self.write_file(tar, member, fd, name)
                self.files.add(parts)

    @staticmethod
    def write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, fd: int, name: str) -> None:
        source = tar.extractfile(member)
        out = os.open(name, _FILE_FLAGS, 0o600, dir_fd=fd)
        try:
            while source is not None:
                chunk = source.read(COPY_CHUNK)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
            # Setuid and setgid bits are dropped; the executable bits are what matter.
            os.fchmod(out, member.mode & 0o777)
            os.utime(out, (member.mtime, member.mtime))
        finally:
            os.close(out)


def _existing_ancestor(dest: str) -> str:
    """The deepest existing directory on the way to ``dest`` (``dest`` itself if it exists)."""
    path = dest
    while True:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                raise
            path = parent
            continue
        except NotADirectoryError:
            raise Conflict(f"destination {dest!r} lies beneath a file") from None
        if not stat.S_ISDIR(st.st_mode):
            what = "is" if path == dest else "lies beneath"
            raise Conflict(f"destination {dest!r} {what} a file, not a directory")
        return path


def _entries(fd: int) -> list[str]:
    return sorted(os.listdir(fd))


def _kind(fd: int, name: str) -> int | None:
    try:
        return stat.S_IFMT(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None


def _merge(src_fd: int, dst_fd: int, where: Parts, move: bool) -> None:
    """Move the extracted tree into the destination (``move=False``: only check that it fits).
    Directories merge into existing directories; anything else replaces what is there."""
    for name in _entries(src_fd):
        src_kind = _kind(src_fd, name)
        dst_kind = _kind(dst_fd, name)
        parts = (*where, name)
        if dst_kind is None or (src_kind != stat.S_IFDIR and dst_kind != stat.S_IFDIR):
            if move:
                os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            continue
        if src_kind != stat.S_IFDIR or dst_kind != stat.S_IFDIR:
            what = "directory" if src_kind == stat.S_IFDIR else "file"
            raise Conflict(
                f"cannot put the archive's {what} {_show(parts)} in place: the destination has "
                f"a {'file' if dst_kind != stat.S_IFDIR else 'directory'} of that name"
            )
        src_child = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
        try:
            dst_child = os.open(name, _DIR_FLAGS, dir_fd=dst_fd)
            try:
                _merge(src_child, dst_child, parts, move)
            finally:
                os.close(dst_child)
        finally:
            os.close(src_child)


def _apply_dir_modes(dest_fd: int, dirs: dict[Parts, tuple[int, float]]) -> None:
    # Deepest first, so that a read-only parent does not block its children.
    for parts in sorted(dirs, key=len, reverse=True):
        mode, mtime = dirs[parts]
        fd = os.dup(dest_fd)
        try:
            for name in parts:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
            os.fchmod(fd, mode)
            os.utime(fd, (mtime, mtime))
        except OSError as exc:
            # Only a concurrent change in the destination gets here; the data is in place.
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                raise
        finally:
            os.close(fd)


def unpack(
    stream: IO[bytes], dest: str, max_bytes: int | None = None,
    before_commit: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Extract a tar stream (plain or compressed) into directory ``dest`` (created when
    missing), all or nothing. ``before_commit`` runs once the archive was read and checked,
    before anything moves into place. Returns ``{"entries", "bytes", "destination"}``."""
    dest = os.path.abspath(dest)
    base = _existing_ancestor(dest)
    base_times = os.stat(base)
    tmp = tempfile.mkdtemp(prefix=TMP_PREFIX, dir=base)
    committing = False
    try:
        root_fd = os.open(tmp, _DIR_FLAGS)
        try:
            extractor = _Extractor(root_fd, max_bytes)
            try:
                with tarfile.open(fileobj=stream, mode="r|*") as tar:
                    for member in tar:
                        extractor.add(tar, member)
            except tarfile.TarError as exc:
                raise Refused(f"not a valid tar archive: {exc}") from None
            # Whatever follows the end-of-archive marker: read it, so the sender is not blocked.
            while stream.read(COPY_CHUNK):
                pass
            if before_commit is not None:
                before_commit()
            committing = True
            os.makedirs(dest, exist_ok=True)
            dest_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                _merge(root_fd, dest_fd, (), move=False)
                _merge(root_fd, dest_fd, (), move=True)
                _apply_dir_modes(dest_fd, extractor.dirs)
            finally:
                os.close(dest_fd)
        finally:
            os.close(root_fd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not committing:
            # A refused archive leaves no trace, not even in its directory's timestamps.
            with contextlib.suppress(OSError):
                os.utime(base, ns=(base_times.st_atime_ns, base_times.st_mtime_ns))
    return {"entries": extractor.entries, "bytes": extractor.total, "destination": dest}


# --- packing -------------------------------------------------------------------------------


def _portable(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    # FIFOs, devices and sockets cannot be unpacked elsewhere (and reading a FIFO blocks).
    if member.isreg() or member.isdir() or member.issym() or member.islnk():
        return member
    return None


def size_hint(path: str) -> int:
    """Roughly the size of the archive of ``path`` (headers and padding included)."""
    total = 1024

    def entry(st: os.stat_result) -> int:
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        return 512 + (size + 511) // 512 * 512

    st = os.lstat(path)
    total += entry(st)
    if stat.S_ISDIR(st.st_mode):
        for top, dirs, files in os.walk(path):
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    total += entry(os.lstat(os.path.join(top, name)))
    return (total + 10239) // 10240 * 10240


def arcname_of(path: str) -> str:
    return os.path.basename(os.path.normpath(path)) or "."


def pack(path: str, out: IO[bytes], arcname: str | None = None) -> None:
    """A tar stream of ``path`` (not following symlinks), rooted at its base name (or at
    ``arcname``; "." packs a directory's contents)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        tar.add(path, arcname=arcname or arcname_of(path), filter=_portable)


# --- the helper process --------------------------------------------------------------------


def _error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, Refused | Aborted):
        return {"ok": False, "error": str(exc) or "aborted", "code": exc.code}
    if isinstance(exc, OSError):
        code = errno.errorcode.get(exc.errno or 0, "EIO")
        text = exc.strerror or str(exc)
        return {"ok": False, "error": f"{text}: {exc.filename}" if exc.filename else text,
                "code": code}
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "code": "EIO"}


def _on_term(signum: int, frame: object) -> None:
    # Once: the cleanup that follows must not be interrupted by a second signal.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Aborted("the transfer was aborted")


def _commit_uninterrupted() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _on_term)
    command = argv[1] if len(argv) > 1 else ""
    if command == "untar" and len(argv) == 4:
        limit = int(argv[3])
        try:
            result = unpack(sys.stdin.buffer, argv[2], limit if limit > 0 else None,
                            before_commit=_commit_uninterrupted)
            reply = {"ok": True, **result}
        except (Exception, Aborted) as exc:
            reply = _error(exc)
        sys.stdout.write(json.dumps(reply) + "\n")
        return 0 if reply["ok"] else 1
    if command == "tar" and len(argv) == 3:
        path = argv[2]
        out = sys.stdout.buffer
        try:
            hint = size_hint(path)
            out.write(json.dumps({"size_hint": hint}).encode() + b"\n")
            pack(path, out)
            out.flush()
        except (Exception, Aborted) as exc:
            sys.stderr.write(json.dumps(_error(exc)) + "\n")
            return 1
        return 0
    sys.stderr.write(json.dumps({"ok": False, "error": "usage: transfer.py untar DEST MAX_BYTES"
                                 " | tar PATH", "code": "EINVAL"}) + "\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

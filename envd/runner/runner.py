#!/usr/bin/env python3
"""The resident agent inside a sandbox: spawns command processes and does file I/O there.

Standard library only: it runs on whatever ``python3`` the sandbox image has. The daemon reaches
it over one unix socket (in a directory only root can enter) and multiplexes every request on
that connection. Frames both ways are ``!II`` (header length, body length), a JSON header, and a
raw body.

Requests carry ``op`` and ``rid``; each gets one reply ``{"rid", "ok", ...}`` (``"error"`` and
``"errno"`` when not ok). Unsolicited events carry ``ev``:

- ``out``  ``{id}`` + body: output of a process, UTF-8 text, sent to the connection attached to it;
- ``exit`` ``{id, code, signal, tail, tail_truncated, delivered}``: broadcast to every connection
  when a process has exited and its output is drained. ``delivered`` says the attached connection
  received all output; otherwise the output waits in the process's unread buffer.

Every command runs as ``bash -lc CMD`` in its own session and process group, as the sandbox user
(the runner itself stays root without capabilities beyond setuid/setgid/kill, so sandboxed code
can neither signal it nor reach its socket). When the leader exits, the output is drained for at
most 50 ms and then the whole group is killed. Output of a process nobody is attached to is kept,
at most 1 MiB of text, oldest dropped first.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import errno as errno_mod
import fcntl
import json
import os
import pwd
import signal
import stat
import struct
import subprocess
import sys
import time
from collections import deque
from typing import Any

PROTOCOL_VERSION = 1
FRAME_PREFIX = struct.Struct("!II")
MAX_HEADER = 1 << 20
MAX_BODY = 256 << 20
READ_CHUNK = 256 * 1024
DRAIN_AFTER_EXIT = 0.05
UNREAD_CAP_CHARS = 1 << 20
TAIL_CHARS = 4000
SEND_HIGH_WATER = 1 << 20
STDIN_WRITE_TIMEOUT = 10.0
MAX_FILE_READ = 64 << 20
# File transfers: tar streams unpacked and packed by transfer.py, a helper process running as
# the sandbox user (real uid, not just an effective one, and off the runner's event loop).
TRANSFER_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transfer.py")
TRANSFER_CHUNK = 1 << 20
MAX_TRANSFERS = 32
TRANSFER_STOP_GRACE = 5.0


def oom_kill_count() -> int | None:
    """The sandbox cgroup's OOM-kill counter (cgroup v2 or v1), when the kernel exposes it."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def encode_frame(header: dict[str, Any], body: bytes = b"") -> list[bytes]:
    head = json.dumps(header, separators=(",", ":")).encode()
    return [FRAME_PREFIX.pack(len(head), len(body)), head, body]


async def read_frame(reader: asyncio.StreamReader) -> tuple[dict[str, Any], bytes]:
    prefix = await reader.readexactly(FRAME_PREFIX.size)
    head_len, body_len = FRAME_PREFIX.unpack(prefix)
    if head_len > MAX_HEADER or body_len > MAX_BODY:
        raise ValueError(f"frame too large ({head_len} + {body_len} bytes)")
    header = json.loads(await reader.readexactly(head_len))
    body = await reader.readexactly(body_len) if body_len else b""
    return header, body


class RunnerError(Exception):
    def __init__(self, message: str, code: str = "EINVAL") -> None:
        super().__init__(message)
        self.code = code


class Connection:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.lock = asyncio.Lock()
        self.closed = False

    async def send(self, header: dict[str, Any], body: bytes = b"") -> None:
        if self.closed:
            return
        self.writer.writelines(encode_frame(header, body))
        transport = self.writer.transport
        if transport.get_write_buffer_size() > SEND_HIGH_WATER:
            async with self.lock:
                try:
                    await self.writer.drain()
                except (ConnectionError, RuntimeError):
                    self.closed = True


class Proc:
    """One command process and what is known of it."""

    def __init__(
        self, pid_id: str, popen: subprocess.Popen[bytes], cmd: str, orphan: str,
        meta: dict[str, Any],
    ) -> None:
        self.id = pid_id
        self.meta = meta  # opaque to the runner; returned by "list"
        self.popen = popen
        self.pgid = popen.pid
        self.cmd = cmd
        self.orphan = orphan  # "kill" or "keep": what happens when its connection goes away
        assert popen.stdout is not None and popen.stdin is not None
        self.out_fd = popen.stdout.fileno()
        self.in_fd = popen.stdin.fileno()
        os.set_blocking(self.out_fd, False)
        os.set_blocking(self.in_fd, False)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.unread: deque[str] = deque()
        self.unread_chars = 0
        self.dropped_chars = 0
        self.tail = ""
        self.tail_truncated = False
        self.attached: Connection | None = None
        # Flow control of live output: bytes the attached connection may still receive (None:
        # unlimited). The daemon grants more as it consumes, so one slow consumer never blocks
        # the connection that every other process and reply of the sandbox shares.
        self.credit: int | None = None
        self.wake = asyncio.Event()  # credit granted, attachment changed, or exited
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.exit_time: float | None = None
        self.exited = asyncio.get_running_loop().create_future()
        self.drained = False  # output fully read and the group killed
        self.exit_sent = False
        self.started = time.time()
        self.last_used = time.monotonic()
        self.oom_before = oom_kill_count()
        self.oom = False

    def note_exit(self, returncode: int) -> None:
        if self.exit_time is not None:
            return
        if returncode < 0:
            self.exit_signal = -returncode
            if self.exit_signal == signal.SIGKILL and self.oom_before is not None:
                after = oom_kill_count()
                self.oom = after is not None and after > self.oom_before
        else:
            self.exit_code = returncode
        self.exit_time = time.monotonic()
        self.wake.set()
        if not self.exited.done():
            self.exited.set_result(None)

    def attach(self, conn: Connection | None, credit: int | None = None) -> None:
        self.attached = conn
        self.credit = credit
        self.wake.set()

    def keep(self, text: str) -> None:
        self.unread.append(text)
        self.unread_chars += len(text)
        while self.unread_chars > UNREAD_CAP_CHARS:
            excess = self.unread_chars - UNREAD_CAP_CHARS
            first = self.unread[0]
            if len(first) <= excess:
                self.unread.popleft()
                self.unread_chars -= len(first)
                self.dropped_chars += len(first)
            else:
                self.unread[0] = first[excess:]
                self.unread_chars -= excess
                self.dropped_chars += excess

    def take_unread(self) -> str:
        parts = list(self.unread)
        if self.dropped_chars:
            parts.insert(0, f"[... {self.dropped_chars} chars of earlier output dropped ...]\n")
        self.unread.clear()
        self.unread_chars = 0
        self.dropped_chars = 0
        return "".join(parts)

    def remember_tail(self, text: str) -> None:
        tail = self.tail + text
        if len(tail) > TAIL_CHARS:
            tail = tail[-TAIL_CHARS:]
            self.tail_truncated = True
        self.tail = tail

    def exit_info(self) -> dict[str, Any]:
        return {
            "code": self.exit_code,
            "signal": self.exit_signal,
            "oom": self.oom,
            "tail": self.tail,
            "tail_truncated": self.tail_truncated,
        }

    async def kill_group(self) -> None:
        """SIGKILL the whole group until nothing is left (a fork bomb keeps forking)."""
        for _ in range(200):
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                return
            await asyncio.sleep(0.005)

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pid": self.popen.pid,
            "cmd": self.cmd,
            "running": self.exit_time is None,
            "unread_chars": self.unread_chars,
            "attached": self.attached is not None,
            "orphan": self.orphan,
            "started": self.started,
            "meta": self.meta,
            **self.exit_info(),
        }


class Transfer:
    """One transfer helper process (``untar`` fed on stdin, or ``tar`` read from stdout)."""

    def __init__(self, tid: str, popen: subprocess.Popen[bytes], conn: Connection) -> None:
        self.id = tid
        self.popen = popen
        self.conn = conn
        self.buffer = b""
        self.eof = False
        self.exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        for stream in (popen.stdin, popen.stdout):
            if stream is not None:
                os.set_blocking(stream.fileno(), False)
                with contextlib.suppress(OSError, AttributeError):
                    fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, TRANSFER_CHUNK)

    def poll(self) -> None:
        code = self.popen.poll()
        if code is not None and not self.exited.done():
            self.exited.set_result(code)

    def close_stdin(self) -> None:
        if self.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()

    def leftovers(self) -> tuple[bytes, bytes]:
        """What the helper wrote and nobody read yet (stdout, stderr); after it exited."""
        out = []
        for stream in (self.popen.stdout, self.popen.stderr):
            data = b""
            if stream is not None and not stream.closed:
                os.set_blocking(stream.fileno(), False)
                with contextlib.suppress(OSError, TypeError):
                    data = stream.read() or b""
                with contextlib.suppress(OSError):
                    stream.close()
            out.append(data)
        self.close_stdin()
        return out[0], out[1]

    def failure(self, fallback: str) -> RunnerError:
        """The helper's own error report (a JSON line), or ``fallback``."""
        out, err = self.leftovers()
        # stderr first: stdout of a packer is archive data, which the sandbox controls.
        for line in [*reversed(err.splitlines()), *reversed((self.buffer + out).splitlines())]:
            with contextlib.suppress(ValueError):
                reply = json.loads(line)
                if isinstance(reply, dict) and reply.get("ok") is False:
                    return RunnerError(str(reply.get("error")), str(reply.get("code", "EIO")))
        detail = err.decode("utf-8", "replace").strip().splitlines()
        return RunnerError(f"{fallback}: {detail[-1]}" if detail else fallback, "EIO")

    async def stop(self) -> None:
        """SIGTERM (the helper removes its temporary files), SIGKILL after a grace period."""
        if not self.exited.done():
            with contextlib.suppress(ProcessLookupError):
                self.popen.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), TRANSFER_STOP_GRACE)
        if not self.exited.done():
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), TRANSFER_STOP_GRACE)
        self.leftovers()


class Runner:
    def __init__(self, uid: int | None, gid: int | None) -> None:
        self.uid = uid
        self.gid = gid
        self.procs: dict[str, Proc] = {}
        self.conns: set[Connection] = set()
        self.transfers: dict[str, Transfer] = {}
        self.next_transfer = 0
        self.base_env = {k: v for k, v in os.environ.items() if not k.startswith("ENVD_")}
        if uid is not None:
            try:
                entry = pwd.getpwuid(uid)
                self.base_env.update(
                    HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name, SHELL="/bin/bash"
                )
            except KeyError:
                self.base_env.update(HOME="/tmp", USER=str(uid), LOGNAME=str(uid))

    # --- process life --------------------------------------------------------------------

    def on_sigchld(self) -> None:
        for transfer in list(self.transfers.values()):
            transfer.poll()
        for proc in list(self.procs.values()):
            if proc.exit_time is None:
                code = proc.popen.poll()
                if code is not None:
                    proc.note_exit(code)

    async def pump(self, proc: Proc) -> None:
        try:
            while True:
                try:
                    data = os.read(proc.out_fd, READ_CHUNK)
                except BlockingIOError:
                    if proc.exit_time is None:
                        await self._readable_or(proc.out_fd, proc.exited, None)
                    else:
                        remaining = proc.exit_time + DRAIN_AFTER_EXIT - time.monotonic()
                        if remaining <= 0:
                            break
                        await self._readable_or(proc.out_fd, None, remaining)
                    continue
                except OSError:
                    break
                if not data:
                    break
                await self.deliver(proc, proc.decoder.decode(data))
            await self.deliver(proc, proc.decoder.decode(b"", final=True))
            await proc.exited  # EOF can come before the leader exits
        finally:
            # Whatever the leader left behind in its group goes with it.
            await proc.kill_group()
            for stream in (proc.popen.stdout, proc.popen.stdin):
                with contextlib.suppress(OSError):
                    if stream is not None:
                        stream.close()
            proc.drained = True
        await self.finish(proc)

    @staticmethod
    async def _readable_or(
        fd: int, other: asyncio.Future[None] | None, timeout: float | None
    ) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, wake)
        try:
            waiters: set[asyncio.Future[None]] = {ready}
            if other is not None:
                waiters.add(other)
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_reader(fd)

    async def deliver(self, proc: Proc, text: str) -> None:
        if not text:
            return
        proc.remember_tail(text)
        # Wait for credit while attached; an exit or a detach ends the wait (after an exit the
        # rest is small: what was still in the pipe).
        while (proc.attached is not None and proc.credit is not None and proc.credit <= 0
               and proc.exit_time is None and not proc.attached.closed):
            proc.wake.clear()
            await proc.wake.wait()
        conn = proc.attached
        if conn is not None and not conn.closed:
            data = text.encode("utf-8", "surrogatepass")
            if proc.credit is not None:
                proc.credit -= len(data)
            await conn.send({"ev": "out", "id": proc.id}, data)
        else:
            proc.keep(text)

    async def finish(self, proc: Proc) -> None:
        delivered = proc.attached is not None and not proc.attached.closed
        event = {"ev": "exit", "id": proc.id, **proc.exit_info(), "delivered": delivered}
        if self.procs.get(proc.id) is not proc:
            return  # forgotten while it ran
        if delivered:
            proc.exit_sent = True
            del self.procs[proc.id]
        for conn in list(self.conns):
            await conn.send(event)

    # --- requests ------------------------------------------------------------------------

    async def handle(self, conn: Connection, header: dict[str, Any], body: bytes) -> None:
        rid = header.get("rid")
        op = header.get("op", "")
        handler = getattr(self, f"op_{op}", None)
        reply: dict[str, Any]
        out = b""
        try:
            if handler is None:
                raise RunnerError(f"unknown op {op!r}")
            result = await handler(conn, header, body)
            if isinstance(result, tuple):
                reply, out = result
            else:
                reply = result or {}
            reply.update(rid=rid, ok=True)
        except RunnerError as exc:
            reply = {"rid": rid, "ok": False, "error": str(exc), "errno": exc.code}
        except OSError as exc:
            code = errno_mod.errorcode.get(exc.errno or 0, "EIO")
            reply = {"rid": rid, "ok": False, "error": os_message(exc), "errno": code}
        except Exception as exc:  # never let one request take the runner down
            error = f"{type(exc).__name__}: {exc}"
            reply = {"rid": rid, "ok": False, "error": error, "errno": "EIO"}
        await conn.send(reply, out)

    async def op_ping(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        return {"version": PROTOCOL_VERSION, "pid": os.getpid(), "procs": len(self.procs)}

    def _get(self, h: dict[str, Any]) -> Proc:
        proc = self.procs.get(str(h.get("id")))
        if proc is None:
            raise RunnerError(f"unknown process {h.get('id')}", "ESRCH")
        proc.last_used = time.monotonic()
        return proc

    async def op_spawn(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        pid_id = str(h["id"])
        if pid_id in self.procs:
            raise RunnerError(f"process id {pid_id} is in use", "EEXIST")
        env = dict(self.base_env)
        env.update({str(k): str(v) for k, v in (h.get("env") or {}).items()})
        kwargs: dict[str, Any] = {}
        if self.uid is not None and os.geteuid() == 0:
            kwargs.update(user=self.uid, group=self.gid, extra_groups=[])
        popen = subprocess.Popen(
            ["/bin/bash", "-lc", str(h["cmd"])],
            cwd=h.get("cwd") or None,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            **kwargs,
        )
        proc = Proc(pid_id, popen, str(h["cmd"]), str(h.get("orphan", "kill")),
                    dict(h.get("meta") or {}))
        self.procs[pid_id] = proc
        if h.get("attach", True):
            proc.attach(conn, _credit(h))
        asyncio.get_running_loop().create_task(self.pump(proc))
        self.on_sigchld()  # it may already have exited
        return {"pid": popen.pid}

    async def op_attach(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        proc = self._get(h)
        # Hand over what was kept, then go live; more may arrive while a send waits.
        while True:
            text = proc.take_unread()
            if not text:
                break
            await conn.send({"ev": "out", "id": proc.id}, text.encode("utf-8", "surrogatepass"))
        proc.attach(conn, _credit(h))
        if "orphan" in h:
            proc.orphan = str(h["orphan"])
        if proc.drained and not proc.exit_sent:
            proc.exit_sent = True
            self.procs.pop(proc.id, None)
            await conn.send({"ev": "exit", "id": proc.id, **proc.exit_info(), "delivered": True})
        return {"running": proc.exit_time is None}

    async def op_detach(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        proc = self._get(h)
        if proc.attached is conn:
            proc.attach(None)
        if "orphan" in h:
            proc.orphan = str(h["orphan"])
        if "meta" in h:
            proc.meta = dict(h["meta"] or {})
        return {"running": proc.exit_time is None}

    async def op_signal(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        proc = self._get(h)
        sig = signal.Signals[str(h.get("signal", "SIGTERM"))]
        if proc.exit_time is None:
            proc.signal_group(sig)
        return {"running": proc.exit_time is None}

    async def op_kill(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        """SIGTERM to the group, SIGKILL after the grace period; replies once the leader is gone."""
        proc = self._get(h)
        if proc.exit_time is not None:
            return {"already_exited": True, "code": proc.exit_code, "signal": proc.exit_signal}
        grace = max(0.0, float(h.get("grace_ms", 1000)) / 1000)
        proc.signal_group(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.exited), grace)
        if proc.exit_time is None:
            proc.signal_group(signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.exited), 5)
        return {"already_exited": False, "code": proc.exit_code, "signal": proc.exit_signal}

    async def op_forget(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        proc = self.procs.pop(str(h.get("id")), None)
        if proc is not None:
            proc.attach(None)
            if proc.exit_time is None:
                proc.signal_group(signal.SIGKILL)
        return {"found": proc is not None}

    async def op_credit(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        """More live output the attached connection can take (it consumed that much)."""
        proc = self.procs.get(str(h.get("id")))
        if proc is not None and proc.attached is conn and proc.credit is not None:
            proc.credit += int(h.get("bytes", 0))
            proc.wake.set()
        return {}

    async def op_stdin(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        proc = self._get(h)
        if proc.exit_time is not None:
            raise RunnerError("the process has exited", "EPIPE")
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + STDIN_WRITE_TIMEOUT
        view = memoryview(body)
        while view:
            try:
                written = os.write(proc.in_fd, view)
                view = view[written:]
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RunnerError("the process is not reading its input", "EAGAIN") from None
                ready: asyncio.Future[None] = loop.create_future()
                loop.add_writer(proc.in_fd, _wake, ready)
                try:
                    await asyncio.wait({ready, proc.exited}, timeout=remaining,
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    loop.remove_writer(proc.in_fd)
                if proc.exit_time is not None:
                    raise RunnerError("the process has exited", "EPIPE") from None
        return {"written": len(body)}

    async def op_list(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        return {"procs": [p.summary() for p in self.procs.values()]}

    # --- files, as the sandbox user ------------------------------------------------------

    @contextlib.contextmanager
    def as_user(self) -> Any:
        if self.uid is None or os.geteuid() != 0:
            yield
            return
        # Exactly the command processes' rights: their uid, their gid, no supplementary groups
        # (root's group 0 would open files the sandbox user's shell cannot).
        groups = os.getgroups()
        os.setgroups([])
        os.setegid(self.gid if self.gid is not None else self.uid)
        os.seteuid(self.uid)
        try:
            yield
        finally:
            os.seteuid(0)
            os.setegid(0)
            os.setgroups(groups)

    async def op_stat(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        with self.as_user():
            try:
                st = os.stat(str(h["path"]))
            except FileNotFoundError:
                return {"kind": "missing"}
            except NotADirectoryError:
                return {"kind": "missing"}
        kind = "file" if _is_reg(st.st_mode) else "dir" if _is_dir(st.st_mode) else "other"
        return {"kind": kind, "size": st.st_size, "mode": st.st_mode & 0o7777}

    async def op_read(
        self, conn: Connection, h: dict[str, Any], body: bytes
    ) -> tuple[dict[str, Any], bytes]:
        """Read at most ``max_bytes`` of a regular file (never blocks on a FIFO or device)."""
        path = str(h["path"])
        limit = min(int(h.get("max_bytes", MAX_FILE_READ)), MAX_FILE_READ)
        with self.as_user():
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if _is_dir(st.st_mode):
                raise RunnerError(f"{path} is a directory", "EISDIR")
            if not _is_reg(st.st_mode):
                raise RunnerError(f"{path} is not a regular file", "EINVAL")
            chunks = []
            left = limit
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            more = bool(os.read(fd, 1)) if left == 0 else False
        finally:
            os.close(fd)
        return {"size": st.st_size, "truncated": more, "mode": st.st_mode & 0o7777}, data

    async def op_write(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        """Atomic write: a temp file beside the target, then rename; keeps an old file's mode."""
        path = str(h["path"])
        parent = os.path.dirname(path) or "."
        with self.as_user():
            if h.get("mkdirs", True):
                os.makedirs(parent, exist_ok=True)
            try:
                st = os.stat(path)
                if _is_dir(st.st_mode):
                    raise RunnerError(f"{path} is a directory", "EISDIR")
                mode = st.st_mode & 0o7777
                created = False
            except FileNotFoundError:
                mode = int(h.get("mode", 0o644))
                created = True
            tmp = os.path.join(parent, f".{os.path.basename(path)}.{os.urandom(4).hex()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, mode)
                os.close(fd)
                fd = -1
                os.rename(tmp, path)
            except BaseException:
                if fd >= 0:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        return {"created": created, "mode": mode}

    async def op_probe(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        """The deepest existing ancestor directory of a path, and some of its entries."""
        path = os.path.normpath(str(h["path"]))
        limit = int(h.get("limit", 2000))
        with self.as_user():
            ancestor = os.path.dirname(path)
            while ancestor and not os.path.isdir(ancestor):
                parent = os.path.dirname(ancestor)
                if parent == ancestor:
                    break
                ancestor = parent
            entries: list[str] = []
            with contextlib.suppress(OSError), os.scandir(ancestor or "/") as it:
                for entry in it:
                    entries.append(entry.name)
                    if len(entries) >= limit:
                        break
        return {"ancestor": ancestor or "/", "entries": entries}

    async def op_realpath(self, conn: Connection, h: dict[str, Any], body: bytes) -> dict[str, Any]:
        """The path with every symlink resolved (missing tails kept), as the sandbox user sees
        it: writes go to a link's target instead of replacing the link with a file."""
        with self.as_user():
            # A few local syscalls, like every file op here.
            return {"path": os.path.realpath(str(h["path"]))}  # noqa: ASYNC240

    # --- file transfers ------------------------------------------------------------------

    def _start_transfer(self, conn: Connection, args: list[str], feed: bool) -> Transfer:
        if len(self.transfers) >= MAX_TRANSFERS:
            raise RunnerError(f"at most {MAX_TRANSFERS} transfers at once", "EAGAIN")
        kwargs: dict[str, Any] = {}
        if self.uid is not None and os.geteuid() == 0:
            kwargs.update(user=self.uid, group=self.gid, extra_groups=[])
        popen = subprocess.Popen(
            [sys.executable, "-I", "-S", TRANSFER_HELPER, *args],
            stdin=subprocess.PIPE if feed else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.base_env,
            cwd="/",
            start_new_session=True,
            close_fds=True,
            **kwargs,
        )
        self.next_transfer += 1
        transfer = Transfer(f"x{self.next_transfer}", popen, conn)
        self.transfers[transfer.id] = transfer
        transfer.poll()  # it may already have exited
        return transfer

    def _transfer(self, h: dict[str, Any]) -> Transfer:
        transfer = self.transfers.get(str(h.get("id")))
        if transfer is None:
            raise RunnerError(f"unknown transfer {h.get('id')}", "ESRCH")
        return transfer

    async def _end_transfer(self, transfer: Transfer) -> None:
        self.transfers.pop(transfer.id, None)
        await transfer.stop()

    async def _wait_fd(self, fd: int, write: bool, transfer: Transfer) -> None:
        """Until ``fd`` is ready or the helper exited."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        (loop.add_writer if write else loop.add_reader)(fd, wake)
        # Once the helper is gone, only the pipe can wake us (no busy loop if something else
        # still holds its end).
        waiters: set[asyncio.Future[Any]] = {ready}
        if not transfer.exited.done():
            waiters.add(transfer.exited)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            (loop.remove_writer if write else loop.remove_reader)(fd)

    async def op_untar_begin(
        self, conn: Connection, h: dict[str, Any], body: bytes
    ) -> dict[str, Any]:
        """Start unpacking into directory ``dest``; feed with untar_chunk, finish with
        untar_end (or untar_abort: nothing is left behind)."""
        dest = str(h["dest"])
        if not os.path.isabs(dest) or "\0" in dest:
            raise RunnerError(f"destination must be an absolute path, not {dest[:200]!r}")
        transfer = self._start_transfer(
            conn, ["untar", dest, str(int(h.get("max_bytes", 0)))], feed=True
        )
        return {"id": transfer.id}

    async def op_untar_chunk(
        self, conn: Connection, h: dict[str, Any], body: bytes
    ) -> dict[str, Any]:
        transfer = self._transfer(h)
        assert transfer.popen.stdin is not None
        fd = transfer.popen.stdin.fileno()
        view = memoryview(body)
        while view:
            if transfer.exited.done():
                break  # it stopped reading: refused the archive, or failed
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                await self._wait_fd(fd, True, transfer)
            except BrokenPipeError:
                await asyncio.wait({transfer.exited}, timeout=TRANSFER_STOP_GRACE)
                break
        if view:
            self.transfers.pop(transfer.id, None)
            error = transfer.failure("the unpacker stopped")
            await transfer.stop()
            raise error
        return {"written": len(body)}

    async def op_untar_end(
        self, conn: Connection, h: dict[str, Any], body: bytes
    ) -> dict[str, Any]:
        transfer = self._transfer(h)
        transfer.close_stdin()
        code = await transfer.exited
        self.transfers.pop(transfer.id, None)
        if code != 0:
            raise transfer.failure(f"the unpacker exited with code {code}")
        out, _err = transfer.leftovers()
        lines = out.strip().splitlines()
        try:
            reply = json.loads(lines[-1])
        except (IndexError, ValueError):
            raise RunnerError("the unpacker gave no result", "EIO") from None
        return {k: v for k, v in reply.items() if k in ("entries", "bytes", "destination")}

    async def op_untar_abort(
        self, conn: Connection, h: dict[str, Any], body: bytes
    ) -> dict[str, Any]:
        transfer = self.transfers.get(str(h.get("id")))
        if transfer is not None:
            await self._end_transfer(transfer)
        return {"found": transfer is not None}

    async def op_tar_begin(
        self, conn: Connection, h: dict[str, Any], body: bytes
    ) -> dict[str, Any]:
        """Start packing ``path``; read the stream with tar_read, release with tar_close."""
        path = str(h["path"])
        if not os.path.isabs(path) or "\0" in path:
            raise RunnerError(f"path must be absolute, not {path[:200]!r}")
        transfer = self._start_transfer(conn, ["tar", path], feed=False)
        assert transfer.popen.stdout is not None
        fd = transfer.popen.stdout.fileno()
        try:
            # The helper's first line: the size hint, or nothing when it failed at once.
            while b"\n" not in transfer.buffer:
                try:
                    data = os.read(fd, TRANSFER_CHUNK)
                except BlockingIOError:
                    await self._wait_fd(fd, False, transfer)
                    continue
                if not data:
                    await asyncio.wait({transfer.exited}, timeout=TRANSFER_STOP_GRACE)
                    raise transfer.failure("the packer failed")
                transfer.buffer += data
            line, _, transfer.buffer = transfer.buffer.partition(b"\n")
            hint = int(json.loads(line).get("size_hint", 0))
        except BaseException:
            await self._end_transfer(transfer)
            raise
        return {"id": transfer.id, "size_hint": hint}

    async def op_tar_read(
        self, conn: Connection, h: dict[str, Any], body: bytes
    ) -> tuple[dict[str, Any], bytes]:
        """The next chunk of the stream; ``eof`` once it is complete."""
        transfer = self._transfer(h)
        limit = max(1, min(int(h.get("max_bytes", TRANSFER_CHUNK)), 8 * TRANSFER_CHUNK))
        assert transfer.popen.stdout is not None
        fd = transfer.popen.stdout.fileno()
        data = transfer.buffer[:limit]
        transfer.buffer = transfer.buffer[limit:]
        while len(data) < limit and not transfer.eof:
            try:
                chunk = os.read(fd, limit - len(data))
            except BlockingIOError:
                if data:
                    break
                await self._wait_fd(fd, False, transfer)
                continue
            if not chunk:
                transfer.eof = True
                break
            data += chunk
        if data:
            return {"eof": False}, data
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(transfer.exited), TRANSFER_STOP_GRACE)
        self.transfers.pop(transfer.id, None)
        if transfer.exited.done() and transfer.exited.result() == 0:
            transfer.leftovers()
            return {"eof": True}, b""
        error = transfer.failure("the packer failed")
        await transfer.stop()
        raise error

    async def op_tar_close(
        self, conn: Connection, h: dict[str, Any], body: bytes
    ) -> dict[str, Any]:
        return await self.op_untar_abort(conn, h, body)

    # --- connections ---------------------------------------------------------------------

    async def serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        conn = Connection(writer)
        self.conns.add(conn)
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                header, body = await read_frame(reader)
                task = asyncio.get_running_loop().create_task(self.handle(conn, header, body))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            conn.closed = True
            self.conns.discard(conn)
            for proc in list(self.procs.values()):
                if proc.attached is conn:
                    proc.attach(None)
                    if proc.orphan == "kill":
                        self.procs.pop(proc.id, None)
                        proc.signal_group(signal.SIGKILL)
            # Transfers die with their connection; an unpacker removes its temporary files.
            for transfer in list(self.transfers.values()):
                if transfer.conn is conn:
                    asyncio.get_running_loop().create_task(self._end_transfer(transfer))
            writer.close()

    def shutdown(self) -> None:
        for proc in self.procs.values():
            proc.signal_group(signal.SIGKILL)


def _credit(h: dict[str, Any]) -> int | None:
    value = h.get("credit")
    return None if value is None else int(value)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def os_message(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return f"{text}: {exc.filename}" if exc.filename else text


def _is_reg(mode: int) -> bool:
    return stat.S_ISREG(mode)


def _is_dir(mode: int) -> bool:
    return stat.S_ISDIR(mode)


async def amain(args: argparse.Namespace) -> None:
    runner = Runner(args.uid, args.gid if args.gid is not None else args.uid)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGCHLD, runner.on_sigchld)
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _wake, stop)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(args.socket)
    old_umask = os.umask(0o077)
    server = await asyncio.start_unix_server(runner.serve_connection, path=args.socket)
    os.umask(old_umask)
    # The directory is root-only anyway; gVisor's host-backed sockets refuse chmod.
    with contextlib.suppress(OSError):
        os.chmod(args.socket, 0o600)
    try:
        await stop
    finally:
        runner.shutdown()
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--uid", type=int, default=None, help="run commands as this user")
    parser.add_argument("--gid", type=int, default=None)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(amain(args))
    sys.exit(0)


if __name__ == "__main__":
    main()

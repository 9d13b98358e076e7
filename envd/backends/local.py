"""The local backend: the runner as a host subprocess in a per-session directory.

No isolation at all: commands run as the daemon's user, on the host. For development and
trusted CI only; the session manager refuses a vault here unless the operator opted in.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from envd.backends.base import (
    RUNNER_DIR,
    SOCKET_NAME,
    BackendError,
    SandboxHandle,
    SandboxSpec,
    SandboxStatus,
    remove_session_dirs,
    session_dirs,
)
from envd.scratchpad import Scratchpad

PID_FILE = "runner.pid"


class LocalBackend:
    name = "local"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def _handle(self, spec: SandboxSpec, pid: int) -> SandboxHandle:
        root, ctl, scratch = session_dirs(self.data_dir, spec.session_id)
        workspace = root / "workspace"
        return SandboxHandle(
            session_id=spec.session_id,
            backend=self.name,
            sandbox_id=str(pid),
            socket_path=str(ctl / SOCKET_NAME),
            workspace=str(workspace),
            scratchpad=Scratchpad(scratch, str(scratch), spec.scratchpad_bytes),
            host_dir=root,
        )

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        root, ctl, _scratch = session_dirs(self.data_dir, spec.session_id)
        workspace = root / "workspace"
        workspace.mkdir(exist_ok=True)
        (ctl / SOCKET_NAME).unlink(missing_ok=True)
        try:
            proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once; reaped in a thread
                [sys.executable, "-I", "-S", str(RUNNER_DIR / "runner.py"),
                 "--socket", str(ctl / SOCKET_NAME)],
                cwd=workspace,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env={k: v for k, v in os.environ.items() if not k.startswith("ENVD_")},
            )
        except OSError as exc:
            remove_session_dirs(self.data_dir, spec.session_id)
            raise BackendError(f"cannot start the runner: {exc}") from exc
        (ctl / PID_FILE).write_text(str(proc.pid))
        # Reap it whenever it exits, so no zombie stays behind.
        asyncio.get_running_loop().run_in_executor(None, proc.wait)
        return self._handle(spec, proc.pid)

    def _pid(self, session_id: str) -> int | None:
        try:
            pid = int((self.data_dir / "sessions" / session_id / "ctl" / PID_FILE).read_text())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return pid

    async def adopt(self, spec: SandboxSpec) -> SandboxHandle | None:
        pid = self._pid(spec.session_id)
        return None if pid is None else self._handle(spec, pid)

    async def destroy(self, session_id: str) -> None:
        pid = self._pid(session_id)
        if pid is not None:
            # The runner kills its commands' process groups when it gets SIGTERM.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if self._pid(session_id) is None:
                    break
                await asyncio.sleep(0.02)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        remove_session_dirs(self.data_dir, session_id)

    async def status(self, session_id: str) -> SandboxStatus:
        if self._pid(session_id) is None:
            return SandboxStatus("missing", "the runner process is gone")
        return SandboxStatus("running")

    async def owned(self) -> list[str]:
        sessions = self.data_dir / "sessions"
        if not sessions.is_dir():
            return []
        return [p.name for p in sessions.iterdir() if (p / "ctl" / PID_FILE).exists()]

    async def close(self) -> None:
        return None


__all__ = ["LocalBackend", "BackendError"]

"""The Backend protocol: where sandboxes come from.

A backend creates, re-adopts and destroys sandboxes; each sandbox runs the runner
(``envd/runner/runner.py``) listening on a unix socket the daemon can reach on the host. Everything
else (tools, framing, sessions) is backend-agnostic.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from envd.scratchpad import Scratchpad

RUNNER_DIR = Path(__file__).resolve().parent.parent / "runner"
SOCKET_NAME = "runner.sock"


class SandboxSpec(BaseModel):
    """What a session asks of its sandbox."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    image: str = Field(description="Sandbox image (docker backend).")
    memory_bytes: int = Field(description="Memory limit; swap is capped at the same value.")
    cpus: float = Field(description="CPU quota in CPUs.")
    pids: int = Field(description="Maximum number of processes and threads.")
    network: Literal["none", "bridge"] = "none"
    isolation: Literal["runc", "gvisor"] = "runc"
    labels: dict[str, str] = Field(default_factory=dict)
    scratchpad_bytes: int = Field(default=0, description="Archive quota; <= 0 unlimited.")


@dataclass
class SandboxHandle:
    """A running sandbox, as the daemon reaches it."""

    session_id: str
    backend: str
    sandbox_id: str  # container id, or the runner's pid for the local backend
    socket_path: str  # host path of the runner's socket
    workspace: str  # as the model sees it
    scratchpad: Scratchpad
    host_dir: Path  # per-session state on the host


@dataclass
class SandboxStatus:
    state: Literal["running", "exited", "missing"]
    detail: str = ""
    oom_killed: bool = False


class BackendError(Exception):
    """A sandbox could not be created, adopted or inspected."""


class Backend(Protocol):
    name: str

    async def create(self, spec: SandboxSpec) -> SandboxHandle: ...

    async def adopt(self, spec: SandboxSpec) -> SandboxHandle | None:
        """Reattach to the sandbox of an existing session (after a daemon restart)."""
        ...

    async def destroy(self, session_id: str) -> None:
        """Remove the sandbox and everything it owns. Idempotent."""
        ...

    async def status(self, session_id: str) -> SandboxStatus: ...

    async def owned(self) -> list[str]:
        """Session ids of all sandboxes this backend finds (for reaping orphans)."""
        ...

    async def close(self) -> None: ...


def session_dirs(data_dir: Path, session_id: str) -> tuple[Path, Path, Path]:
    """The per-session host directories: (root, ctl, scratchpad).

    ``ctl`` holds the runner socket and is reachable by root only; ``scratchpad`` is where the
    daemon archives output (the sandbox sees it read-only)."""
    root = data_dir / "sessions" / session_id
    ctl = root / "ctl"
    scratch = root / "scratchpad"
    for path, mode in ((root, 0o711), (ctl, 0o700), (scratch, 0o755)):
        path.mkdir(mode=mode, parents=True, exist_ok=True)
        path.chmod(mode)
    return root, ctl, scratch


def remove_session_dirs(data_dir: Path, session_id: str) -> None:
    shutil.rmtree(data_dir / "sessions" / session_id, ignore_errors=True)

"""The docker backend: one container per session, runc or gVisor.

The container's main process is the runner (under docker's init, which reaps orphans), as root
with only the capabilities it needs to start commands as the sandbox user and signal them; the
commands themselves end up with none. The runner code is bind-mounted read-only, so any image
with ``python3`` works. Mounts: ``/workspace`` (a named volume), ``/scratchpad`` (host
directory, read-only inside), ``/run/envd`` (host directory holding the runner socket, root only).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import Mount

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

LABEL_MANAGED = "envd.managed"
LABEL_OWNER = "envd.owner"
LABEL_SESSION = "envd.session"
WORKSPACE = "/workspace"
SCRATCHPAD = "/scratchpad"
CONTROL_DIR = "/run/envd"
RUNNER_MOUNT = "/opt/envd-runner"
RUNNER_CAPS = ["SETUID", "SETGID", "KILL"]
GVISOR_PIDS_FACTOR = 4
GVISOR_PIDS_EXTRA = 256


class DockerBackend:
    name = "docker"

    def __init__(
        self,
        data_dir: Path,
        owner: str,
        sandbox_uid: int = 1000,
        sandbox_gid: int = 1000,
        gvisor_runtime: str = "runsc",
        client: docker.DockerClient | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.owner = owner
        self.uid = sandbox_uid
        self.gid = sandbox_gid
        self.gvisor_runtime = gvisor_runtime
        self._client = client

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            try:
                self._client = docker.from_env(timeout=120)
            except docker.errors.DockerException as exc:
                raise BackendError(f"cannot reach the Docker engine: {exc}") from exc
        return self._client

    def _names(self, session_id: str) -> tuple[str, str]:
        return f"envd-{session_id}", f"envd-ws-{session_id}"

    def _handle(self, spec: SandboxSpec, container_id: str) -> SandboxHandle:
        root, ctl, scratch = session_dirs(self.data_dir, spec.session_id)
        return SandboxHandle(
            session_id=spec.session_id,
            backend=self.name,
            sandbox_id=container_id,
            socket_path=str(ctl / SOCKET_NAME),
            workspace=WORKSPACE,
            scratchpad=Scratchpad(scratch, SCRATCHPAD, spec.scratchpad_bytes),
            host_dir=root,
        )

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        return await asyncio.to_thread(self._create, spec)

    def _create(self, spec: SandboxSpec) -> SandboxHandle:
        _root, ctl, scratch = session_dirs(self.data_dir, spec.session_id)
        (ctl / SOCKET_NAME).unlink(missing_ok=True)
        name, volume = self._names(spec.session_id)
        labels = {
            **{f"envd.label.{k}": v for k, v in spec.labels.items()},
            LABEL_MANAGED: "1",
            LABEL_OWNER: self.owner,
            LABEL_SESSION: spec.session_id,
        }
        params: dict[str, Any] = dict(
            image=spec.image,
            command=[
                # -S: no site import (the runner is stdlib only); it halves the start time.
                "python3", "-I", "-S", f"{RUNNER_MOUNT}/runner.py",
                "--socket", f"{CONTROL_DIR}/{SOCKET_NAME}",
                "--uid", str(self.uid), "--gid", str(self.gid),
            ],
            name=name,
            hostname="sandbox",
            labels=labels,
            user="0:0",
            working_dir=WORKSPACE,
            init=True,
            detach=True,
            network_mode=spec.network,
            cap_drop=["ALL"],
            cap_add=RUNNER_CAPS,
            security_opt=["no-new-privileges"],
            pids_limit=spec.pids,
            mem_limit=spec.memory_bytes,
            memswap_limit=spec.memory_bytes,
            nano_cpus=int(spec.cpus * 1e9),
            environment={"PYTHONDONTWRITEBYTECODE": "1"},
            mounts=[
                Mount(WORKSPACE, volume, type="volume", labels=labels),
                Mount(SCRATCHPAD, str(scratch), type="bind", read_only=True),
                Mount(CONTROL_DIR, str(ctl), type="bind"),
                Mount(RUNNER_MOUNT, str(RUNNER_DIR), type="bind", read_only=True),
            ],
        )
        if spec.isolation == "gvisor":
            params["runtime"] = self.gvisor_runtime
            # The host cgroup also counts gVisor's own threads (the sentry, and one stub thread
            # per sandboxed task on the ptrace platform): leave room for them, or the sandbox
            # dies when its processes come close to the limit.
            params["pids_limit"] = spec.pids * GVISOR_PIDS_FACTOR + GVISOR_PIDS_EXTRA
        try:
            container = self.client.containers.run(**params)
        except docker.errors.ImageNotFound as exc:
            self._remove(spec.session_id)
            raise BackendError(f"image {spec.image!r} not found; build it first") from exc
        except docker.errors.APIError as exc:
            self._remove(spec.session_id)
            raise BackendError(f"cannot start the sandbox: {exc.explanation or exc}") from exc
        return self._handle(spec, container.id)

    async def adopt(self, spec: SandboxSpec) -> SandboxHandle | None:
        def find() -> str | None:
            try:
                container = self.client.containers.get(self._names(spec.session_id)[0])
            except docker.errors.NotFound:
                return None
            if container.labels.get(LABEL_OWNER) != self.owner:
                return None
            if container.status != "running":
                return None
            return str(container.id)

        container_id = await asyncio.to_thread(find)
        return None if container_id is None else self._handle(spec, container_id)

    async def destroy(self, session_id: str) -> None:
        await asyncio.to_thread(self._remove, session_id)

    def _remove(self, session_id: str) -> None:
        name, volume = self._names(session_id)
        with contextlib.suppress(docker.errors.NotFound):
            self.client.api.remove_container(name, force=True, v=True)
        for _ in range(20):
            try:
                self.client.api.remove_volume(volume, force=True)
                break
            except docker.errors.NotFound:
                break
            except docker.errors.APIError:
                # Still in use while the container's removal completes.
                time.sleep(0.1)
        remove_session_dirs(self.data_dir, session_id)

    async def status(self, session_id: str) -> SandboxStatus:
        def inspect() -> SandboxStatus:
            try:
                state = self.client.api.inspect_container(self._names(session_id)[0])["State"]
            except docker.errors.NotFound:
                return SandboxStatus("missing", "the sandbox container no longer exists")
            if state.get("Running"):
                return SandboxStatus("running")
            detail = f"the sandbox container exited (code {state.get('ExitCode')})"
            if state.get("OOMKilled"):
                detail += " after running out of memory"
            return SandboxStatus("exited", detail, bool(state.get("OOMKilled")))

        return await asyncio.to_thread(inspect)

    async def owned(self) -> list[str]:
        def find() -> list[str]:
            containers = self.client.api.containers(
                all=True, filters={"label": [f"{LABEL_OWNER}={self.owner}"]}
            )
            return [c["Labels"][LABEL_SESSION] for c in containers]

        return await asyncio.to_thread(find)

    async def close(self) -> None:
        if self._client is not None:
            await asyncio.to_thread(self._client.close)

"""Fixtures: daemons, sessions and environments on every backend.

Docker-backed fixtures need a Docker engine and the sandbox image; ``scripts/ensure-docker.sh``
and ``images/build.sh`` (run by ``make test``) provide both on a fresh machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from envd.config import DaemonConfig
from envd.environment import SandboxEnvironment
from envd.sessions.manager import SessionManager
from envd.sessions.model import SessionOptions
from envd.sessions.store import SessionStore

ROOT = Path(__file__).resolve().parent.parent
IMAGE = os.environ.get("ENVD_TEST_IMAGE", "envd-sandbox:latest")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that disturb the whole machine (restarting dockerd) run last."""
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        subprocess.run(
            ["docker", "image", "inspect", IMAGE], check=True, capture_output=True, timeout=30
        )
    except (subprocess.SubprocessError, OSError):
        return False
    return True


@pytest.fixture(scope="session")
def docker_ready() -> None:
    if not docker_available():
        if os.environ.get("CI"):
            pytest.fail("Docker or the sandbox image is missing (run make test)")
        pytest.skip("Docker engine or sandbox image not available")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="envd-test-"))
    DATA_DIRS.add(str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make_backend(kind: str, data_dir: Path):  # type: ignore[no-untyped-def]
    if kind == "local":
        from envd.backends.local import LocalBackend

        return LocalBackend(data_dir)
    from envd.backends.docker import DockerBackend

    OWNERS.add(f"test-{data_dir.name}")
    return DockerBackend(data_dir, owner=f"test-{data_dir.name}")


@pytest.fixture
async def manager_factory(data_dir: Path) -> AsyncIterator[object]:
    """``await make(kind, **config)`` -> a started SessionManager; all shut down and their
    sessions closed at the end."""
    managers: list[SessionManager] = []

    async def make(kind: str = "docker", **config: object) -> SessionManager:
        cfg = DaemonConfig(
            data_dir=data_dir,
            backend=kind,
            default_image=IMAGE,  # type: ignore[arg-type]
            **config,
        )  # type: ignore[arg-type]
        manager = SessionManager(
            cfg, make_backend(kind, data_dir), SessionStore(data_dir / "state.db")
        )
        await manager.start()
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        for session in list(manager.sessions.values()):
            await manager.close(session.session_id, session.tenant)
        await manager.shutdown()


@pytest.fixture(params=["local", "docker", "gvisor"])
async def sandbox_env(
    request: pytest.FixtureRequest, manager_factory
) -> AsyncIterator[SandboxEnvironment]:  # type: ignore[no-untyped-def]
    """An in-process Environment on each backend, and under gVisor."""
    if request.param != "local":
        request.getfixturevalue("docker_ready")
    manager = await manager_factory("local" if request.param == "local" else "docker")
    isolation = "gvisor" if request.param == "gvisor" else "runc"
    session = await manager.create(SessionOptions(isolation=isolation), tenant="")
    env = SandboxEnvironment(session, manager)
    yield env
    await env.dispose()


@pytest.fixture
async def local_env(manager_factory) -> AsyncIterator[SandboxEnvironment]:  # type: ignore[no-untyped-def]
    manager = await manager_factory("local")
    session = await manager.create(SessionOptions(), tenant="")
    env = SandboxEnvironment(session, manager)
    yield env
    await env.dispose()


@pytest.fixture
async def docker_env(docker_ready, manager_factory) -> AsyncIterator[SandboxEnvironment]:  # type: ignore[no-untyped-def]
    manager = await manager_factory("docker")
    session = await manager.create(SessionOptions(), tenant="")
    env = SandboxEnvironment(session, manager)
    yield env
    await env.dispose()


@pytest.fixture(scope="session")
def envd_daemon(docker_ready: None):  # type: ignore[no-untyped-def]
    """One real ``envd serve`` (docker backend, bearer tokens) shared by end-to-end tests."""
    from tests.daemon import DaemonProcess

    root = Path(tempfile.mkdtemp(prefix="envd-e2e-"))
    daemon = DaemonProcess(root / "data", image=IMAGE).start()
    yield daemon
    daemon.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def remote_env(envd_daemon):  # type: ignore[no-untyped-def]
    from engine.remote import RemoteEnvironment

    env = await RemoteEnvironment.create(envd_daemon.target, token=envd_daemon.token)
    yield env
    await env.dispose()


# Owners (docker label envd.owner) of every sandbox this test run may create, and the data
# directories of its daemons and managers (local runners and daemons name them in argv).
OWNERS: set[str] = set()
DATA_DIRS: set[str] = set()


def daemon_owner(data_dir: Path) -> str:
    import hashlib

    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]


def _leftovers() -> set[str]:
    found: set[str] = set()
    for owner in OWNERS:
        label = f"label=envd.owner={owner}"
        for command in (
            ["docker", "ps", "-aq", "--filter", label],
            ["docker", "volume", "ls", "-q", "--filter", label],
        ):
            out = subprocess.run(command, capture_output=True, text=True, timeout=30).stdout
            found.update(out.split())
    return found


@pytest.fixture(scope="session", autouse=True)
def no_leaked_sandboxes() -> Iterator[None]:
    """Fail the run when the suite leaves an envd container or workspace volume behind."""
    yield
    docker = shutil.which("docker") is not None and OWNERS
    leaked = (_leftovers() if docker else set()) | _leftover_processes()
    assert not leaked, f"the test suite leaked containers, volumes or processes: {sorted(leaked)}"


def _leftover_processes() -> set[str]:
    """Runners of the local backend and daemons still running from this test run."""
    found: set[str] = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(d in argv for d in DATA_DIRS) and ("runner.py" in argv or "envd.cli" in argv):
            found.add(f"pid {cmdline.parent.name}: {argv[:120]}")
    return found

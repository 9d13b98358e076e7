"""The session registry: create, find, list and close sessions; recover them after a restart.

Sessions are recorded in SQLite before their sandbox starts, so a crash at any point leaves
either a record to recover or an orphan to reap, never an invisible container. At start the
manager re-adopts the sandboxes of recorded sessions (command sessions included: they live in
the runner) and removes the sandboxes no record claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Iterable
from typing import Any

from engine import omni
from envd.backends.base import Backend, BackendError, SandboxHandle, SandboxSpec
from envd.channel import ChannelClosed, RunnerCallError, RunnerChannel
from envd.commands import CommandFinished
from envd.config import DaemonConfig
from envd.errors import (
    CapacityExceeded,
    InvalidArgument,
    SessionNotFound,
    ShuttingDown,
)
from envd.metrics import Metrics
from envd.sessions.model import SessionOptions, check_session_id, new_session_id
from envd.sessions.pool import WarmPool
from envd.sessions.session import Session, SessionClosed
from envd.sessions.start import start_sandbox
from envd.sessions.store import SessionStore
from envd.tools import builtin_tools

log = logging.getLogger("envd.sessions")
_REAP_INTERVAL_S = 1.0


class SessionManager:
    def __init__(
        self,
        config: DaemonConfig,
        backend: Backend,
        store: SessionStore,
        metrics: Metrics | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.store = store
        self.metrics = metrics
        self.pool = WarmPool(
            backend, self._spec(SessionOptions(), "warm"), config.warm_pool_size, metrics
        )
        self.sessions: dict[str, Session] = {}
        self._starting = 0
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Re-adopt recorded sessions, reap orphans, start the idle reaper."""
        for stored in self.store.all():
            spec = SandboxSpec.model_validate_json(stored.spec_json)
            try:
                handle = await self.backend.adopt(spec)
                if handle is None:
                    raise BackendError("its sandbox is gone")
                channel = await RunnerChannel.connect(handle.socket_path, timeout=5)
            except (BackendError, ChannelClosed, RunnerCallError, OSError) as exc:
                log.warning("dropping session %s after restart: %s", stored.session_id, exc)
                self.store.delete(stored.session_id)
                with contextlib.suppress(BackendError):
                    await self.backend.destroy(stored.session_id)
                continue
            handle.scratchpad.measure()
            session = self._register(
                stored.session_id,
                stored.tenant,
                stored.options,
                spec,
                handle,
                channel,
                stored.created_at,
            )
            await self._adopt_commands(session)
            log.info("re-adopted session %s", session.session_id)
        known = set(self.sessions)
        for session_id in await self.backend.owned():
            if session_id not in known:
                log.info("removing orphaned sandbox of session %s", session_id)
                await self.backend.destroy(session_id)
        self._spawn(self._reap_idle())
        self.pool.start()
        if self.metrics is not None:
            self.metrics.watch_sessions(self._count_states)
            self.metrics.sandboxes.set_function(lambda: len(self.sessions) + len(self.pool.ready))

    def _count_states(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for session in self.sessions.values():
            counts[session.state] = counts.get(session.state, 0) + 1
        return counts

    async def _adopt_commands(self, session: Session) -> None:
        try:
            listing = await session.channel.call("list")
        except (ChannelClosed, RunnerCallError):
            return
        for proc in listing.get("procs", []):
            if proc.get("orphan") == "keep":
                meta = proc.get("meta") or {}
                session.commands.adopt(
                    str(proc["id"]), str(proc.get("cmd", "")), bool(meta.get("background"))
                )
                if not proc.get("running"):
                    # It finished while the daemon was away: report it now.
                    session.commands.note_exit(proc)
            else:
                with contextlib.suppress(ChannelClosed, RunnerCallError):
                    await session.channel.call("forget", id=proc["id"])

    async def abort_calls(self, within: float = 5.0) -> None:
        """Stop taking sessions and abort every running call: each ends properly, with
        ``aborted``. Returns when they have ended (or after ``within`` seconds)."""
        self._closing = True
        for session in self.sessions.values():
            for abort in session.running.values():
                abort.set()
        deadline = time.monotonic() + within
        # A bounded poll at shutdown: simpler than an event per call.
        while any(s.running for s in self.sessions.values()) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    async def shutdown(self) -> None:
        """Abort running calls and drop connections; sandboxes stay for the next start to
        re-adopt (warm ones are removed)."""
        await self.abort_calls()
        for task in list(self._tasks):
            task.cancel()
        for session in self.sessions.values():
            await session.channel.close()
        await self.pool.close()
        await self.backend.close()
        self.store.close()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- sessions --------------------------------------------------------------------------

    async def create(self, options: SessionOptions, tenant: str) -> Session:
        if self._closing:
            raise ShuttingDown("the daemon is shutting down")
        options.check(set(builtin_tools()))
        if options.vault and self.backend.name == "local" and not self.config.allow_local_vault:
            raise InvalidArgument(
                "the local backend has no isolation: it takes no vault unless the daemon runs "
                "with --allow-local-vault"
            )
        if len(self.sessions) + self._starting >= self.config.max_sessions:
            raise CapacityExceeded(
                f"the daemon is at its limit of {self.config.max_sessions} sessions; "
                "close one or try again later"
            )
        spec = self._spec(options, new_session_id())
        if not options.idle_ttl_seconds:
            options = options.model_copy(update={"idle_ttl_seconds": self.config.idle_ttl_seconds})
        created_at = omni.now()
        started = time.monotonic()
        warm = self.pool.claim(spec)
        if warm is not None:
            handle, channel = warm.handle, warm.channel
            handle.scratchpad.quota_bytes = spec.scratchpad_bytes
            spec = spec.model_copy(update={"session_id": warm.spec.session_id})
            self.store.put(spec.session_id, tenant, options, spec.model_dump_json(), created_at)
        else:
            handle, channel = await self._start_cold(spec, tenant, options, created_at)
        session_id = spec.session_id
        if self.metrics is not None:
            start = "warm" if warm is not None else "cold"
            self.metrics.sessions_created.labels(start).inc()
            self.metrics.session_create_duration.labels(start).observe(time.monotonic() - started)
        session = self._register(session_id, tenant, options, spec, handle, channel, created_at)
        log.info("created session %s", session_id, extra={"session_id": session_id})
        return session

    def _spec(self, options: SessionOptions, session_id: str) -> SandboxSpec:
        return SandboxSpec(
            session_id=session_id,
            image=options.image or self.config.default_image,
            memory_bytes=options.memory_bytes or self.config.memory_bytes,
            cpus=options.cpus or self.config.cpus,
            pids=options.pids or self.config.pids,
            network=options.network,
            isolation=options.isolation,
            labels=options.labels,
            scratchpad_bytes=options.scratchpad_bytes or self.config.scratchpad_bytes,
        )

    async def _start_cold(
        self, spec: SandboxSpec, tenant: str, options: SessionOptions, created_at: str
    ) -> tuple[SandboxHandle, RunnerChannel]:
        # Recorded before the sandbox starts: a crash in between leaves a record to recover
        # or an orphan to reap, never an invisible container.
        self._starting += 1
        try:
            self.store.put(spec.session_id, tenant, options, spec.model_dump_json(), created_at)
            try:
                return await start_sandbox(self.backend, spec)
            except BaseException:
                self.store.delete(spec.session_id)
                raise
        finally:
            self._starting -= 1

    def _register(
        self,
        session_id: str,
        tenant: str,
        options: SessionOptions,
        spec: SandboxSpec,
        handle: SandboxHandle,
        channel: RunnerChannel,
        created_at: str,
    ) -> Session:
        session = Session(
            session_id=session_id,
            tenant=tenant,
            options=options,
            spec=spec,
            handle=handle,
            channel=channel,
            created_at=created_at,
            metrics=self.metrics,
        )
        session.on_finished = self._on_finished
        self.sessions[session_id] = session
        self._spawn(self._watch_channel(session))
        return session

    def _on_finished(self, session: Session, finished: CommandFinished) -> None:
        log.info(
            "background command %s finished: %s",
            finished.process_id,
            finished.status,
            extra={"session_id": session.session_id},
        )

    async def _watch_channel(self, session: Session) -> None:
        await session.channel.wait_closed()
        if session.state == "closed" or self._closing:
            return
        status = await self.backend.status(session.session_id)
        detail = status.detail or "the sandbox runner went away"
        session.state = "broken"
        session.detail = detail
        session.channel.close_reason = f"the sandbox is unavailable: {detail}"
        log.warning(
            "session %s broken: %s",
            session.session_id,
            detail,
            extra={"session_id": session.session_id},
        )
        session.publish(SessionClosed("broken"))

    def get(self, session_id: str, tenant: str) -> Session:
        check_session_id(session_id)
        session = self.sessions.get(session_id)
        if session is None or session.tenant != tenant:
            raise SessionNotFound(session_id)
        return session

    def list(self, tenant: str, labels: dict[str, str] | None = None) -> Iterable[Session]:
        wanted = labels or {}
        for session in list(self.sessions.values()):
            if session.tenant != tenant:
                continue
            if all(session.options.labels.get(k) == v for k, v in wanted.items()):
                yield session

    async def close(self, session_id: str, tenant: str, reason: str = "closed") -> bool:
        """Dispose of a session and its sandbox. False when there was nothing to close."""
        check_session_id(session_id)
        session = self.sessions.get(session_id)
        if session is None or session.tenant != tenant:
            return False
        del self.sessions[session_id]
        session.state = "closed"
        for abort in session.running.values():
            abort.set()
        await session.channel.close()
        try:
            await self.backend.destroy(session_id)
        finally:
            self.store.delete(session_id)
        session.publish(SessionClosed(reason))
        log.info("closed session %s (%s)", session_id, reason, extra={"session_id": session_id})
        return True

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(_REAP_INTERVAL_S)
            now = time.monotonic()
            for session in list(self.sessions.values()):
                ttl = session.options.idle_ttl_seconds
                # Running calls and running command sessions are activity, not idleness.
                busy = session.running or session.commands.running()
                if ttl > 0 and not busy and now - session.last_used > ttl:
                    with contextlib.suppress(Exception):
                        await self.close(session.session_id, session.tenant, "idle_timeout")

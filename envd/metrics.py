"""Prometheus metrics of one daemon, in its own registry (served by ``--metrics-listen``)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.tool_calls = Counter(
            "envd_tool_calls", "Tool calls finished, by tool and outcome (stop_reason).",
            ["tool", "outcome"], registry=self.registry)
        self.tool_duration = Histogram(
            "envd_tool_call_duration_seconds", "Tool call duration, by tool.",
            ["tool"], buckets=_DURATION_BUCKETS, registry=self.registry)
        self.streamed_chars = Counter(
            "envd_output_streamed_chars", "Characters of tool output streamed to callers.",
            registry=self.registry)
        self.archived_bytes = Counter(
            "envd_output_archived_bytes", "Bytes of truncated tool output archived.",
            registry=self.registry)
        self.sessions_created = Counter(
            "envd_sessions_created", "Sessions created, by how (cold or warm).", ["start"],
            registry=self.registry)
        self.session_create_duration = Histogram(
            "envd_session_create_duration_seconds", "CreateSession duration.", ["start"],
            buckets=_DURATION_BUCKETS, registry=self.registry)
        self.sessions = Gauge("envd_sessions", "Sessions, by state.", ["state"],
                              registry=self.registry)
        self.pool_ready = Gauge("envd_pool_ready", "Warm sandboxes ready to be claimed.",
                                registry=self.registry)
        self.sandboxes = Gauge("envd_sandboxes", "Sandboxes held (sessions and warm pool).",
                               registry=self.registry)

    def watch_sessions(self, states: Callable[[], dict[str, int]]) -> None:
        """Session gauges computed at scrape time from the registry."""
        for state in ("starting", "running", "broken"):
            self.sessions.labels(state).set_function(_count_of(states, state))


def _count_of(states: Callable[[], dict[str, int]], state: str) -> Callable[[], float]:
    return lambda: float(states().get(state, 0))

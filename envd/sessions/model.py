"""Domain types of a session: what a caller asks for, and what the daemon records."""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from envd.errors import InvalidArgument

SESSION_ID = re.compile(r"^s-[0-9a-f]{20}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$")

SessionStateName = Literal["starting", "running", "broken", "closed"]


def new_session_id() -> str:
    return "s-" + os.urandom(10).hex()


def check_session_id(session_id: str) -> str:
    if not SESSION_ID.match(session_id or ""):
        raise InvalidArgument(
            f"malformed session_id {session_id[:80]!r}: expected s- and 20 hex digits"
        )
    return session_id


class ToolOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_ms: int | None = Field(default=None, description="<= 0 disables the timeout.")
    max_output_length: int | None = Field(default=None, description="<= 0 disables truncation.")
    disabled: bool = False


class SessionOptions(BaseModel):
    """A CreateSession request, validated. Zero values mean the daemon's default."""

    model_config = ConfigDict(extra="forbid")

    image: str = ""
    vault: dict[str, str] = Field(default_factory=dict, repr=False)
    labels: dict[str, str] = Field(default_factory=dict)
    memory_bytes: int = 0
    cpus: float = 0.0
    pids: int = 0
    scratchpad_bytes: int = 0
    network: Literal["none", "bridge"] = "none"
    isolation: Literal["runc", "gvisor"] = "runc"
    idle_ttl_seconds: int = 0
    tools: dict[str, ToolOverride] = Field(default_factory=dict)
    env_defaults: dict[str, str] = Field(default_factory=dict)
    mask_secrets: bool = True

    def check(self, known_tools: set[str]) -> None:
        for name in (*self.vault, *self.env_defaults):
            if not _ENV_NAME.match(name):
                raise InvalidArgument(f"invalid environment variable name {name[:80]!r}")
        for value in (*self.vault.values(), *self.env_defaults.values()):
            if "\0" in value:
                raise InvalidArgument("environment values cannot contain NUL bytes")
        for key in self.labels:
            if not _LABEL_KEY.match(key):
                raise InvalidArgument(f"invalid label key {key[:80]!r}")
        for name in self.tools:
            if name not in known_tools:
                raise InvalidArgument(f"unknown tool {name[:80]!r} in tool overrides")
        if self.memory_bytes < 0 or self.cpus < 0 or self.pids < 0 or self.scratchpad_bytes < 0:
            raise InvalidArgument("resource limits cannot be negative")
        if self.memory_bytes and self.memory_bytes < 16 * 1024 * 1024:
            raise InvalidArgument("memory_bytes must be at least 16 MiB")
        if self.isolation == "gvisor" and self.network != "none":
            raise InvalidArgument("isolation \"gvisor\" runs without a network here; "
                                  "use network \"none\"")
        if self.image and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.\-/:@]{0,254}$", self.image):
            raise InvalidArgument(f"invalid image reference {self.image[:80]!r}")

"""One error hierarchy for the daemon; the gRPC edge maps each class to one status code."""

from __future__ import annotations


class EnvdError(Exception):
    """Base of every error envd raises on purpose; its message is safe to show a caller."""


class InvalidArgument(EnvdError, ValueError):
    """A request field is malformed or out of range."""


class SessionNotFound(EnvdError, LookupError):
    """No session with that id exists for this caller (or it was closed)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found")
        self.session_id = session_id


class CapacityExceeded(EnvdError):
    """The daemon is at its session limit."""


class SandboxUnavailable(EnvdError):
    """The session's sandbox could not be created or is unreachable."""


class Unauthenticated(EnvdError):
    """The caller presented no valid credentials."""


class PermissionDeniedError(EnvdError, PermissionError):
    """The caller may not do this."""


class PathNotFound(EnvdError, LookupError):
    """A file or directory the request names does not exist in the sandbox."""


class TooLarge(EnvdError):
    """The request exceeds a size limit (an upload, or the sandbox's disk)."""


class FailedPrecondition(EnvdError):
    """The sandbox is not in a state where this works (e.g. a file where a directory must be)."""


class ShuttingDown(EnvdError):
    """The daemon is stopping and takes no new work."""

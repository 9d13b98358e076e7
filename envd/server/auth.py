"""Caller authentication: bearer tokens mapped to tenants.

Tokens come from a file of ``TOKEN TENANT`` lines (``#`` comments allowed) and from
``ENVD_TOKENS`` (``TOKEN:TENANT`` pairs separated by commas). Only their SHA-256 digests are kept
in memory. Without any token the daemon creates one for the tenant ``default`` in
``<data-dir>/token`` (mode 0600), so that it is never open by accident; ``--insecure`` serves
everyone as the tenant ``default``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from envd.errors import Unauthenticated

DEFAULT_TENANT = "default"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenAuth:
    def __init__(self, tokens: Mapping[str, str], insecure: bool = False) -> None:
        self._tenants = [(_digest(token), tenant) for token, tenant in tokens.items()]
        self.insecure = insecure

    @classmethod
    def load(
        cls,
        tokens_file: Path | None,
        env: Mapping[str, str],
        data_dir: Path,
        insecure: bool,
    ) -> TokenAuth:
        tokens: dict[str, str] = {}
        if tokens_file is not None:
            for number, line in enumerate(tokens_file.read_text().splitlines(), 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                parts = line.split()
                if len(parts) != 2:
                    raise ValueError(f"{tokens_file}:{number}: expected 'TOKEN TENANT'")
                tokens[parts[0]] = parts[1]
        for pair in filter(None, (env.get("ENVD_TOKENS") or "").split(",")):
            token, _, tenant = pair.strip().partition(":")
            tokens[token] = tenant or DEFAULT_TENANT
        if not tokens and not insecure:
            tokens[ensure_token_file(data_dir)] = DEFAULT_TENANT
        return cls(tokens, insecure)

    def tenant(self, metadata: Mapping[str, str]) -> str:
        """The tenant of a caller, from its ``authorization: Bearer <token>`` metadata."""
        if self.insecure:
            return DEFAULT_TENANT
        header = metadata.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("missing bearer token: send 'authorization: Bearer <token>'")
        digest = _digest(token.strip())
        found = None
        for known, tenant in self._tenants:
            if hmac.compare_digest(known, digest):
                found = tenant
        if found is None:
            raise Unauthenticated("invalid bearer token")
        return found


def ensure_token_file(data_dir: Path) -> str:
    path = data_dir / "token"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token

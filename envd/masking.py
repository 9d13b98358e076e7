"""Mask vault values in tool output, also when a value is split across output chunks."""

from __future__ import annotations

from collections.abc import Iterable

MASK = "***"
# Shorter values would mask ordinary text all over the output.
MIN_SECRET_LENGTH = 4


class SecretMasker:
    """Stream filter: ``feed`` returns text that is safe to show now, holding back a tail that
    could be the start of a secret; ``flush`` releases it at the end."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so that a secret containing another is masked whole.
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH},
                              key=len, reverse=True)
        self._pending = ""

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def mask(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def feed(self, text: str) -> str:
        if not self.secrets:
            return text
        text = self.mask(self._pending + text)
        hold = self._partial_suffix(text)
        self._pending = text[len(text) - hold:] if hold else ""
        return text[: len(text) - hold] if hold else text

    def flush(self) -> str:
        rest, self._pending = self._pending, ""
        return rest

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a secret."""
        longest = 0
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(text)), longest, -1):
                if text.endswith(secret[:size]):
                    longest = size
                    break
        return longest

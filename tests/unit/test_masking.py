from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from envd.masking import MASK, SecretMasker


def stream(masker: SecretMasker, chunks: list[str]) -> str:
    return "".join(masker.feed(c) for c in chunks) + masker.flush()


def test_masks_whole_and_split_values() -> None:
    masker = SecretMasker(["hunter22", "abc"])
    assert stream(masker, ["pass=hun", "ter22;", " again hunter2", "2!"]) == \
        f"pass={MASK}; again {MASK}!"
    assert masker.mask("abc") == "abc"  # too short to mask


def test_longest_secret_first() -> None:
    assert SecretMasker(["token", "token-long"]).mask("token-long token") == f"{MASK} {MASK}"


def test_no_secrets_is_identity() -> None:
    masker = SecretMasker([])
    assert not masker and masker.feed("x") == "x"


@given(st.text(min_size=0, max_size=200), st.lists(st.integers(0, 200), max_size=8))
def test_chunking_never_changes_the_result(text: str, cuts: list[int]) -> None:
    secret = "s3cr3t"
    full = text.replace("\n", "") + secret + text
    points = sorted({min(c, len(full)) for c in cuts})
    chunks = [full[a:b] for a, b in zip([0, *points], [*points, len(full)], strict=True)]
    masker = SecretMasker([secret])
    out = stream(masker, chunks)
    assert secret not in out
    assert out == SecretMasker([secret]).mask(full)

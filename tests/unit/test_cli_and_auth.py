from __future__ import annotations

from pathlib import Path

import pytest

from envd.cli import build_parser, config_reference
from envd.errors import Unauthenticated
from envd.server.auth import DEFAULT_TENANT, TokenAuth

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_page_is_current() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == config_reference()


def test_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVD_WARM_POOL", "3")
    monkeypatch.setenv("ENVD_INSECURE", "1")
    args = build_parser().parse_args(["serve", "--pids", "64", "--backend", "local"])
    assert (args.warm_pool_size, args.insecure, args.pids, args.backend) == (3, True, 64, "local")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--backend", "kubernetes"])


def test_tokens_map_to_tenants(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# comment\nalpha-token alice\n\nbeta-token bob\n")
    auth = TokenAuth.load(tokens, {"ENVD_TOKENS": "gamma:carol,delta"}, tmp_path, False)
    assert auth.tenant({"authorization": "Bearer alpha-token"}) == "alice"
    assert auth.tenant({"authorization": "bearer beta-token"}) == "bob"
    assert auth.tenant({"authorization": "Bearer gamma"}) == "carol"
    assert auth.tenant({"authorization": "Bearer delta"}) == DEFAULT_TENANT
    for metadata in ({}, {"authorization": "Bearer nope"}, {"authorization": "Basic alpha-token"},
                     {"authorization": "Bearer "}):
        with pytest.raises(Unauthenticated):
            auth.tenant(metadata)


def test_a_token_is_made_when_none_is_configured(tmp_path: Path) -> None:
    auth = TokenAuth.load(None, {}, tmp_path, insecure=False)
    token = (tmp_path / "token").read_text().strip()
    assert len(token) >= 32 and oct((tmp_path / "token").stat().st_mode & 0o777) == "0o600"
    assert auth.tenant({"authorization": f"Bearer {token}"}) == DEFAULT_TENANT
    assert TokenAuth.load(None, {}, tmp_path, insecure=True).tenant({}) == DEFAULT_TENANT

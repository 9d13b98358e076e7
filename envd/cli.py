"""``envd serve``: run the daemon. Every flag can also be set by an ENVD_* environment variable."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from envd import logs
from envd.config import DaemonConfig


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"ENVD_{name}", default)


def build_parser() -> argparse.ArgumentParser:
    defaults = DaemonConfig()
    parser = argparse.ArgumentParser(prog="envd", description="Sandboxed tool execution over gRPC.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the daemon")
    add = serve.add_argument
    add("--listen", default=_env("LISTEN", defaults.listen), help="HOST:PORT (ENVD_LISTEN)")
    add("--data-dir", type=Path, default=Path(_env("DATA_DIR", str(defaults.data_dir)) or ""),
        help="state, scratchpads and runner sockets (ENVD_DATA_DIR)")
    add("--backend", choices=["docker", "local"], default=_env("BACKEND", defaults.backend),
        help="sandbox backend (ENVD_BACKEND)")
    add("--image", dest="default_image", default=_env("IMAGE", defaults.default_image),
        help="default sandbox image (ENVD_IMAGE)")
    add("--memory-bytes", type=int, default=int(_env("MEMORY_BYTES", str(defaults.memory_bytes)) or 0))
    add("--cpus", type=float, default=float(_env("CPUS", str(defaults.cpus)) or 0))
    add("--pids", type=int, default=int(_env("PIDS", str(defaults.pids)) or 0))
    add("--scratchpad-bytes", type=int,
        default=int(_env("SCRATCHPAD_BYTES", str(defaults.scratchpad_bytes)) or 0))
    add("--max-sessions", type=int, default=int(_env("MAX_SESSIONS", str(defaults.max_sessions)) or 0))
    add("--idle-ttl-seconds", type=int,
        default=int(_env("IDLE_TTL_SECONDS", str(defaults.idle_ttl_seconds)) or 0))
    add("--warm-pool", dest="warm_pool_size", type=int,
        default=int(_env("WARM_POOL", str(defaults.warm_pool_size)) or 0),
        help="sandboxes of the default shape kept ready (ENVD_WARM_POOL)")
    add("--metrics-listen", default=_env("METRICS_LISTEN", defaults.metrics_listen),
        help="HOST:PORT for Prometheus /metrics; empty disables (ENVD_METRICS_LISTEN)")
    add("--allow-local-vault", action="store_true",
        default=_env("ALLOW_LOCAL_VAULT", "") == "1")
    add("--insecure", action="store_true", default=_env("INSECURE", "") == "1",
        help="no authentication: every caller is the tenant 'default' (ENVD_INSECURE=1)")
    add("--tokens-file", type=Path, default=_path(_env("TOKENS_FILE")),
        help="file of 'TOKEN TENANT' lines (ENVD_TOKENS_FILE); also ENVD_TOKENS=tok:tenant,...")
    add("--tls-cert", type=Path, default=_path(_env("TLS_CERT")))
    add("--tls-key", type=Path, default=_path(_env("TLS_KEY")))
    add("--tls-client-ca", type=Path, default=_path(_env("TLS_CLIENT_CA")),
        help="require client certificates signed by this CA (mutual TLS)")
    add("--log-level", default=_env("LOG_LEVEL", defaults.log_level))
    return parser


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        fields = {k: v for k, v in vars(args).items() if k != "command"}
        try:
            config = DaemonConfig(**fields)
        except ValueError as exc:
            sys.exit(f"envd: invalid configuration: {exc}")
        logs.setup(config.log_level)
        from envd.server.app import serve

        try:
            asyncio.run(serve(config))
        except OSError as exc:
            sys.exit(f"envd: {exc}")


if __name__ == "__main__":
    main()

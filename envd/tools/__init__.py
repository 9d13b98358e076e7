"""The builtin tool registry: every module in this package that defines ``TOOL`` is a tool.

Adding a tool is adding one module here; nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from envd.tools.base import Tool


@cache
def builtin_tools() -> dict[str, Tool]:
    tools: dict[str, Tool] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        tool = getattr(module, "TOOL", None)
        if isinstance(tool, Tool):
            tools[tool.name] = tool
    return tools


__all__ = ["Tool", "builtin_tools"]

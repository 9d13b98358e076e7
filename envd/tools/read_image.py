"""read_image: a PNG, JPEG, GIF or WebP image from the sandbox or the web, as a data URL.

Files are read by the runner, inside the sandbox and as the sandbox user; URLs are fetched by a
short-lived process inside the sandbox, so its network policy applies (and with network
``none`` there is nothing to try). The host never opens a sandbox path or a URL itself.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import contextlib
import json
import posixpath
import re
import shlex
import urllib.parse
from typing import Any

from envd.channel import ChannelClosed, RunnerCallError
from envd.commands import new_process_id, stream_until
from envd.tools.base import Tool, ToolContext, ToolFailure, ToolResult, require_string

MAX_IMAGE_BYTES = 5 * 1024 * 1024
SNIFF_BYTES = 8192

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_EXTENSIONS = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_SUPPORTED = "read_image reads PNG, JPEG, GIF and WebP images"

# Runs inside the sandbox: one marker line with a JSON header, then the body in base64 (the
# runner relays output as UTF-8 text, so raw bytes would not survive).
_MARKER = "\x1eread_image "
_FETCH = r"""
import base64, json, os, sys, urllib.error, urllib.request
url, limit = os.environ["READ_IMAGE_URL"], int(os.environ["READ_IMAGE_LIMIT"])
def say(**h):
    sys.stdout.write("\x1eread_image " + json.dumps(h) + "\n")
try:
    req = urllib.request.Request(url, headers={"User-Agent": "envd-read_image",
                                               "Accept": "image/*;q=1.0, */*;q=0.5"})
    with urllib.request.urlopen(req, timeout=float(os.environ["READ_IMAGE_TIMEOUT"])) as resp:
        data = resp.read(limit + 1)
        ctype = resp.headers.get_content_type()
except urllib.error.HTTPError as e:
    say(ok=False, error=f"HTTP {e.code} {e.reason}")
except urllib.error.URLError as e:
    say(ok=False, error=str(e.reason))
except Exception as e:
    say(ok=False, error=f"{type(e).__name__}: {e}")
else:
    say(ok=True, content_type=ctype)
    sys.stdout.write(base64.b64encode(data).decode())
"""


def sniff_type(data: bytes, name: str) -> str | None:
    """The image type from magic bytes, else from the name's extension (None: not an image)."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if looks_like_text(data):
        return None  # a text file named .png is still text
    return _EXTENSIONS.get(posixpath.splitext(name.lower())[1])


def looks_like_text(data: bytes) -> bool:
    sample = data[:SNIFF_BYTES]
    if b"\0" in sample:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
    except UnicodeDecodeError:
        return False
    return True


def describe(mime: str, size: int) -> str:
    return f"{mime}, {size / 1000:.1f} kB"


async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    source = require_string(args, "source", "read_image")
    if not source.strip():
        raise ToolFailure('Invalid "source": expected a file path or an http(s) URL (got "").')
    scheme = _SCHEME.match(source)
    if scheme and scheme.group(1).lower() in ("http", "https"):
        label, name = source, urllib.parse.urlsplit(source).path
        data = await _fetch(source, ctx)
    elif scheme and (
        source[len(scheme.group(0)):].startswith("//") or scheme.group(1).lower() == "data"
    ):
        raise ToolFailure(
            f'Cannot read "{source}": unsupported URL scheme "{scheme.group(1)}". '
            "Pass a local path or an http(s) URL."
        )
    else:
        label = name = ctx.resolve(source)
        data = await _read_file(label, ctx)

    if not data:
        raise ToolFailure(f'"{label}" is empty (0 bytes): there is no image to read.')
    if len(data) > MAX_IMAGE_BYTES:
        raise ToolFailure(f'"{label}" is too large for read_image (more than 5 MiB).')
    mime = sniff_type(data, name)
    if mime is None:
        if looks_like_text(data):
            raise ToolFailure(
                f'"{label}" is a text file, not an image. {_SUPPORTED}; use read_file for text.'
            )
        raise ToolFailure(f'"{label}" is not a supported image: {_SUPPORTED}.')
    await ctx.emit(describe(mime, len(data)))
    url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    return ToolResult(images=[url])


async def _read_file(path: str, ctx: ToolContext) -> bytes:
    """At most 5 MiB + 1 byte: one more than allowed tells a file that is too large."""
    try:
        header, data = await ctx.channel.call_with_body(
            "read", path=path, max_bytes=MAX_IMAGE_BYTES + 1
        )
    except RunnerCallError as exc:
        if exc.code in ("ENOENT", "ENOTDIR"):
            raise ToolFailure(
                f'File not found: "{path}". Absolute paths are supported; relative paths '
                f"resolve against the workspace ({ctx.workspace})."
            ) from None
        if exc.code == "EISDIR":
            raise ToolFailure(
                f'Cannot read "{path}": it is a directory. Pass the path of an image file.'
            ) from None
        if exc.code == "EACCES":
            raise ToolFailure(f'Cannot read "{path}": permission denied.') from None
        raise ToolFailure(f'Cannot read "{path}": {exc}.') from None
    if header.get("truncated") or len(data) > MAX_IMAGE_BYTES:
        raise ToolFailure(
            f'"{path}" is too large for read_image ({header.get("size")} bytes; '
            "the limit is 5 MiB)."
        )
    return data


async def _fetch(url: str, ctx: ToolContext) -> bytes:
    if not ctx.network:
        raise ToolFailure(
            f'Cannot fetch "{url}": this session has no network access (network "none"). '
            "Put the image in the workspace and pass its path instead."
        )
    fetch_id = new_process_id()
    # Leave time to report before the call's own timeout would.
    budget_s = max(1.0, (ctx.timeout_ms - 5000) / 1000) if ctx.timeout_ms > 0 else 60.0
    chunks: list[str] = []

    async def collect(text: str) -> None:
        chunks.append(text)

    channel = ctx.channel
    async with channel.subscribe(fetch_id) as stream:
        try:
            await channel.call(
                "spawn",
                id=fetch_id,
                cmd="exec python3 -I -c " + shlex.quote(_FETCH),
                cwd=ctx.workspace,
                # Not the command environment: the vault stays with the model's own commands.
                env={
                    "READ_IMAGE_URL": url,
                    "READ_IMAGE_LIMIT": str(MAX_IMAGE_BYTES),
                    "READ_IMAGE_TIMEOUT": str(budget_s),
                },
                attach=True,
                orphan="kill",
                meta={"internal": "read_image"},
            )
        except RunnerCallError as exc:
            raise ToolFailure(f'Cannot fetch "{url}": {exc}.') from None
        settled = False
        try:
            info = await stream_until(stream, collect, None)
            settled = True
        finally:
            if not settled:
                stream.close()
                with contextlib.suppress(RunnerCallError, ChannelClosed):
                    await asyncio.shield(ctx.commands.kill(fetch_id))

    text = "".join(chunks)
    marker = text.find(_MARKER)
    if marker < 0:
        detail = text.strip()[-500:] or f"the fetch helper exited with {info}"
        raise ToolFailure(f'Cannot fetch "{url}": {detail}')
    line, _, body = text[marker + len(_MARKER):].partition("\n")
    header = json.loads(line)
    if not header.get("ok"):
        raise ToolFailure(f'Cannot fetch "{url}": {header.get("error")}.')
    return base64.b64decode(body.strip())


TOOL = Tool(
    name="read_image",
    description=(
        "Read an image (PNG, JPEG, GIF or WebP, at most 5 MiB) so that you can see it: a file "
        "in the sandbox (absolute, or relative to the workspace) or an http(s) URL (fetched "
        "from inside the sandbox; needs network access)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "source": {
                "type": "string",
                "description": (
                    "Path of the image file (absolute, or relative to the workspace), or an "
                    "http:// or https:// URL."
                ),
            },
        },
        "required": ["source"],
        "additionalProperties": False,
    },
    run=run,
    permission="r",
    timeout_ms=60_000,
    max_output_length=16_000,
)

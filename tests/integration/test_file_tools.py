"""read_file, write_file and edit_file against a real sandbox, on every backend.

Files are prepared and checked with exec_command (the shell sees the sandbox as the model's
commands do), so these tests also prove that the tools act on the same file system, as the
same user.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from envd.environment import SandboxEnvironment
from tests.helpers import CallResult, call_tool

pytestmark = pytest.mark.anyio


def ws(env: SandboxEnvironment) -> str:
    return env.session.handle.workspace


def is_docker(env: SandboxEnvironment) -> bool:
    return env.session.handle.backend == "docker"


async def sh(env: SandboxEnvironment, cmd: str) -> str:
    result = await call_tool(env, "exec_command", {"cmd": cmd})
    assert result.stop_reason == "completed", result.output
    return "" if result.output == "[no output]" else result.output


async def read(env: SandboxEnvironment, **args: object) -> CallResult:
    return await call_tool(env, "read_file", args)


def failed(result: CallResult, text: str) -> None:
    assert (result.output, result.stop_reason) == (text, "failed")


def completed(result: CallResult, text: str) -> None:
    assert (result.output, result.stop_reason) == (text, "completed")


# --- read_file ---------------------------------------------------------------------------------


async def test_read_numbers_lines_for_relative_and_absolute_paths(sandbox_env):
    await sh(sandbox_env, r"printf 'alpha\nbeta\n\tgamma\n' > f.txt")
    expected = "     1\talpha\n     2\tbeta\n     3\t\tgamma"
    completed(await read(sandbox_env, file_path="f.txt"), expected)
    completed(await read(sandbox_env, file_path=f"{ws(sandbox_env)}/f.txt"), expected)
    completed(await read(sandbox_env, file_path="./sub/../f.txt"), expected)


async def test_read_window_offset_and_limit(sandbox_env):
    await sh(sandbox_env, "seq 1 10 > n.txt")
    note = "[file has 10 lines total; showing 3-4 — call again with offset to continue]"
    completed(await read(sandbox_env, file_path="n.txt", offset=3, limit=2),
              f"     3\t3\n     4\t4\n{note}")
    # Numeric strings are accepted, fractions floored.
    completed(await read(sandbox_env, file_path="n.txt", offset="3", limit="2.7"),
              f"     3\t3\n     4\t4\n{note}")
    # The last window has nothing more to announce; offsets below 1 clamp to 1.
    completed(await read(sandbox_env, file_path="n.txt", offset=9, limit=5),
              "     9\t9\n    10\t10")
    completed(await read(sandbox_env, file_path="n.txt", offset=0, limit=1),
              "     1\t1\n[file has 10 lines total; showing 1-1 — call again with offset to "
              "continue]")
    completed(await read(sandbox_env, file_path="n.txt", offset=-4, limit=1),
              "     1\t1\n[file has 10 lines total; showing 1-1 — call again with offset to "
              "continue]")


async def test_read_argument_errors(sandbox_env):
    await sh(sandbox_env, "seq 1 3 > n.txt")
    failed(await read(sandbox_env), 'Missing required argument "file_path" for read_file.')
    failed(await read(sandbox_env, file_path="n.txt", offset="abc"),
           'Invalid "offset": expected a number (got "abc").')
    failed(await read(sandbox_env, file_path="n.txt", limit=0),
           'Invalid "limit": expected a positive number of lines (got 0).')
    failed(await read(sandbox_env, file_path="n.txt", limit=-3),
           'Invalid "limit": expected a positive number of lines (got -3).')
    failed(await read(sandbox_env, file_path="n.txt", offset=4),
           f'Offset 4 is past the end of "{ws(sandbox_env)}/n.txt" (3 lines total).')


async def test_read_cuts_long_lines_and_shows_crlf(sandbox_env):
    await sh(sandbox_env, r"head -c 2500 /dev/zero | tr '\0' x > long.txt")
    await sh(sandbox_env, r"printf 'a\r\nb\r\n' > crlf.txt")
    completed(await read(sandbox_env, file_path="long.txt"),
              "     1\t" + "x" * 2000 + "… [line truncated]")
    completed(await read(sandbox_env, file_path="crlf.txt"),
              "     1\ta\n     2\tb\n(file uses CRLF line endings)")


async def test_read_empty_binary_and_directory(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, r": > empty.txt; printf 'a\0b' > bin.dat; mkdir d")
    completed(await read(sandbox_env, file_path="empty.txt"),
              f'"{root}/empty.txt" is an empty file (0 lines).')
    failed(await read(sandbox_env, file_path="bin.dat"),
           f'"{root}/bin.dat" looks like a binary file (contains NUL bytes). Use shell commands '
           "to inspect it, or read_image if it is an image.")
    failed(await read(sandbox_env, file_path="d"),
           f'Cannot read "{root}/d": it is a directory. Pass the path of a file inside it.')


async def test_read_missing_file_hints_at_similar_names(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, "touch notes.txt notes.md zzz.py; mkdir -p sub; touch sub/alpha.py")
    failed(await read(sandbox_env, file_path="note.txt"),
           f'File not found: "{root}/note.txt". Absolute paths are supported; relative paths '
           f"resolve against the workspace ({root}).\n"
           f'Deepest existing directory: "{root}"; similarly named entries there: '
           '"notes.txt", "notes.md".')
    failed(await read(sandbox_env, file_path="sub/gone/x.txt"),
           f'File not found: "{root}/sub/gone/x.txt". Absolute paths are supported; relative '
           f"paths resolve against the workspace ({root}).\n"
           f'Deepest existing directory: "{root}/sub" (no similarly named entries).')


async def test_read_stops_at_the_output_budget(sandbox_env):
    # 3000 lines of 100 characters: each renders as 107 characters plus a newline, and the
    # budget is 64000 - 256 = 63744, so 590 lines fit (108 * 590 - 1 = 63719).
    await sh(sandbox_env, "seq -f '%0100g' 1 3000 > wide.txt")
    result = await read(sandbox_env, file_path="wide.txt")
    body, note = result.output.rsplit("\n", 1)
    assert result.stop_reason == "completed"
    assert note == ("[file has 3000 lines total; showing 1-590 (output limit reached) — call "
                    "again with offset to continue]")
    assert len(body) == 63719
    assert body.endswith("\n   590\t" + "0" * 97 + "590")


async def test_read_scans_at_most_8_mib(sandbox_env):
    # 100-byte lines: the first 8 MiB hold 83886 whole lines (8388608 / 100).
    await sh(sandbox_env, "seq -f '%099g' 1 94372 > big.txt")
    result = await read(sandbox_env, file_path="big.txt", offset=83885, limit=5)
    completed(result,
              f" 83885\t{83885:099d}\n 83886\t{83886:099d}\n"
              "[file has more than 83886 lines; showing 83885-83886 — call again with offset "
              "to continue]")
    failed(await read(sandbox_env, file_path="big.txt", offset=90000),
           f'Offset 90000 is beyond the part of "{ws(sandbox_env)}/big.txt" that read_file '
           "scans (the first 8 MiB, 83886 lines). Use shell commands (e.g. sed -n "
           "'90000,+99p') to read further.")


async def test_read_fifo_fails_at_once(sandbox_env):
    await sh(sandbox_env, "mkfifo pipe")
    started = time.monotonic()
    result = await read(sandbox_env, file_path="pipe")
    assert time.monotonic() - started < 5
    failed(result, f'Cannot read "{ws(sandbox_env)}/pipe": it is not a regular file (a FIFO, '
                   "socket or device). Use shell commands for it.")


async def test_read_follows_a_symlink_out_of_the_workspace(sandbox_env):
    # The runner opens the link inside the sandbox: it sees what the model's shell sees.
    await sh(sandbox_env, "ln -s /etc/hostname host_link")
    shown = await sh(sandbox_env, "cat host_link")
    expected = "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(shown.splitlines(), 1))
    completed(await read(sandbox_env, file_path="host_link"), expected)
    if is_docker(sandbox_env):
        assert expected == "     1\tsandbox"


async def test_read_truncated_output_archive(sandbox_env):
    # The archive path in the frame's note is a valid read_file argument.
    result = await call_tool(sandbox_env, "exec_command", {"cmd": "seq 1 5000"})
    archive = result.output.rsplit("[output archived: ", 1)[1].rstrip("]")
    completed(await read(sandbox_env, file_path=archive, offset=4999),
              "  4999\t4999\n  5000\t5000")


async def test_read_system_files_as_the_sandbox_user(docker_env):
    completed(await read(docker_env, file_path="/etc/passwd", limit=1), "     1\t"
              + (await sh(docker_env, "head -n 1 /etc/passwd")).rstrip("\n")
              + "\n[file has "
              + (await sh(docker_env, "wc -l < /etc/passwd")).strip()
              + " lines total; showing 1-1 — call again with offset to continue]")
    failed(await read(docker_env, file_path="/etc/shadow"),
           'Cannot read "/etc/shadow": permission denied (the sandbox user has no access to it).')


async def test_read_has_no_more_rights_than_the_shell(docker_env):
    container = f"envd-{docker_env.session.session_id}"
    proc = await asyncio.create_subprocess_exec(
        "docker", "exec", "-u", "0", container, "sh", "-c",
        "echo secret > /tmp/rootonly && chmod 640 /tmp/rootonly")
    assert await proc.wait() == 0
    shell = await call_tool(docker_env, "exec_command", {"cmd": "cat /tmp/rootonly"})
    assert shell.stop_reason == "failed" and "Permission denied" in shell.output
    failed(await read(docker_env, file_path="/tmp/rootonly"),
           'Cannot read "/tmp/rootonly": permission denied (the sandbox user has no access to '
           "it).")


# --- write_file --------------------------------------------------------------------------------


async def write(env: SandboxEnvironment, **args: object) -> CallResult:
    return await call_tool(env, "write_file", args)


async def test_write_creates_file_and_parents(sandbox_env):
    root = ws(sandbox_env)
    completed(await write(sandbox_env, file_path="a/b/new.txt", content="one\ntwo\n"),
              f'Created "{root}/a/b/new.txt" (2 lines, 8 bytes).')
    assert await sh(sandbox_env, "cat a/b/new.txt") == "one\ntwo\n"
    assert await sh(sandbox_env, "find a/b/new.txt -printf '%m\\n'") == "644\n"
    # Owned by the user the model's commands run as.
    owner = await sh(sandbox_env, "find a/b/new.txt -printf '%U\\n'")
    assert owner == await sh(sandbox_env, "id -u")
    completed(await write(sandbox_env, file_path=f"{root}/empty.txt", content=""),
              f'Created "{root}/empty.txt" (0 lines, 0 bytes).')
    assert await sh(sandbox_env, "wc -c < empty.txt") == "0\n"
    completed(await write(sandbox_env, file_path="u.txt", content="é"),
              f'Created "{root}/u.txt" (1 lines, 2 bytes).')
    failed(await write(sandbox_env, file_path="x.txt"),
           'Missing required argument "content" for write_file.')


async def test_write_overwrite_shows_diff_and_keeps_mode(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, "seq 1 10 > w.txt; chmod 750 w.txt")
    new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n"
    completed(await write(sandbox_env, file_path="w.txt", content=new),
              f'Overwrote "{root}/w.txt" (10 lines, 24 bytes).\n'
              "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8")
    assert await sh(sandbox_env, "cat w.txt") == new
    assert await sh(sandbox_env, "find w.txt -printf '%m\\n'") == "750\n"
    completed(await write(sandbox_env, file_path="w.txt", content=new),
              f'Overwrote "{root}/w.txt" (10 lines, 24 bytes).\n(content unchanged)')


async def test_write_summaries_instead_of_diffs(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, "seq 1 2000 > many.txt; seq -f '%099g' 1 11000 > huge.txt; "
                          r"printf 'a\0b' > bin.dat")
    content = "".join(f"n{i}\n" for i in range(1, 2001))
    completed(await write(sandbox_env, file_path="many.txt", content=content),
              f'Overwrote "{root}/many.txt" (2000 lines, {len(content)} bytes).\n'
              "+2000/\u22122000 lines vs the previous content (diff too large to show)")
    completed(await write(sandbox_env, file_path="huge.txt", content="x\n"),
              f'Overwrote "{root}/huge.txt" (1 lines, 2 bytes).\n'
              "(no diff shown: the previous content was larger than 1 MiB)")
    completed(await write(sandbox_env, file_path="bin.dat", content="text\n"),
              f'Overwrote "{root}/bin.dat" (1 lines, 5 bytes).\n'
              "(no diff shown: the previous content was binary)")
    assert await sh(sandbox_env, "cat huge.txt bin.dat") == "x\ntext\n"


async def test_write_refusals(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, "mkdir d; touch f.txt; mkfifo pipe")
    failed(await write(sandbox_env, file_path="d", content="x"),
           f'Cannot write "{root}/d": it is a directory. Pass the path of a file inside it.')
    failed(await write(sandbox_env, file_path="f.txt/x", content="x"),
           f'Cannot write "{root}/f.txt/x": a component of the path is not a directory.')
    failed(await write(sandbox_env, file_path="pipe", content="x"),
           f'Cannot write "{root}/pipe": it is not a regular file (a FIFO, socket or device). '
           "Use shell commands for it.")
    assert await sh(sandbox_env, "test -p pipe && echo fifo") == "fifo\n"


async def test_write_through_a_symlink_keeps_the_link(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, "echo old > target.txt; ln -s target.txt link.txt")
    completed(await write(sandbox_env, file_path="link.txt", content="new\n"),
              f'Overwrote "{root}/link.txt" (1 lines, 4 bytes).\n@@ -1,1 +1,1 @@\n-old\n+new')
    assert await sh(sandbox_env, "test -L link.txt && cat target.txt") == "new\n"
    # A dangling link is written through too, as the shell's `>` would.
    await sh(sandbox_env, "ln -s sub/made.txt dangling")
    completed(await write(sandbox_env, file_path="dangling", content="x\n"),
              f'Created "{root}/dangling" (1 lines, 2 bytes).')
    assert await sh(sandbox_env, "test -L dangling && cat sub/made.txt") == "x\n"


async def test_write_outside_what_the_sandbox_user_may_change(docker_env):
    await call_tool(docker_env, "exec_command", {"cmd": "ln -s /etc/passwd pw"})
    before = await sh(docker_env, "cat /etc/passwd")
    failed(await write(docker_env, file_path="pw", content="owned\n"),
           'Cannot write "/workspace/pw": permission denied (the sandbox user has no access to '
           "it).")
    failed(await write(docker_env, file_path="/etc/evil.txt", content="x"),
           'Cannot write "/etc/evil.txt": permission denied (the sandbox user has no access to '
           "it).")
    assert await sh(docker_env, "cat /etc/passwd") == before
    assert await sh(docker_env, "test -L pw && ls /etc/evil.txt 2>&1 || true") == (
        "ls: cannot access '/etc/evil.txt': No such file or directory\n")


# --- edit_file ---------------------------------------------------------------------------------


async def edit(env: SandboxEnvironment, **args: object) -> CallResult:
    return await call_tool(env, "edit_file", args)


async def test_edit_replaces_once_with_diff_and_keeps_mode(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, "seq 1 10 > e.txt; chmod 751 e.txt")
    completed(await edit(sandbox_env, file_path="e.txt", old_string="5\n", new_string="five\n"),
              f'Replaced 1 occurrence(s) in "{root}/e.txt".\n'
              "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8")
    assert await sh(sandbox_env, "cat e.txt") == "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n"
    assert await sh(sandbox_env, "find e.txt -printf '%m\\n'") == "751\n"


async def test_edit_counts_matches(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, r"printf 'x = 1\nx = 1\n' > m.txt; printf 'aaaa\n' > a.txt")
    failed(await edit(sandbox_env, file_path="m.txt", old_string="x = 1", new_string="x = 2"),
           f'old_string occurs 2 times in "{root}/m.txt". Add surrounding context to make it '
           "unique, or set replace_all to true to replace every occurrence.")
    assert await sh(sandbox_env, "cat m.txt") == "x = 1\nx = 1\n"
    completed(await edit(sandbox_env, file_path="m.txt", old_string="x = 1", new_string="x = 2",
                         replace_all=True),
              f'Replaced 2 occurrence(s) in "{root}/m.txt".\n'
              "@@ -1,2 +1,2 @@\n-x = 1\n-x = 1\n+x = 2\n+x = 2")
    # Non-overlapping: "aa" occurs twice in "aaaa", not three times.
    completed(await edit(sandbox_env, file_path="a.txt", old_string="aa", new_string="b",
                         replace_all="true"),
              f'Replaced 2 occurrence(s) in "{root}/a.txt".\n@@ -1,1 +1,1 @@\n-aaaa\n+bb')


async def test_edit_shows_at_most_five_hunks(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, "for i in $(seq 1 70); do if [ $((i % 10)) = 0 ]; then echo TODO; "
                          "else echo line $i; fi; done > t.txt")
    result = await edit(sandbox_env, file_path="t.txt", old_string="TODO", new_string="DONE",
                        replace_all=True)
    assert result.stop_reason == "completed"
    lines = result.output.split("\n")
    assert lines[0] == f'Replaced 7 occurrence(s) in "{root}/t.txt".'
    assert [line for line in lines if line.startswith("@@")] == [
        f"@@ -{n - 3},7 +{n - 3},7 @@" for n in (10, 20, 30, 40, 50)]
    assert lines[1:9] == ["@@ -7,7 +7,7 @@", " line 7", " line 8", " line 9", "-TODO", "+DONE",
                          " line 11", " line 12"]
    assert lines[-1] == "…and 2 more replacements"
    assert "TODO" not in await sh(sandbox_env, "cat t.txt")


async def test_edit_failures(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, r"printf 'a\r\nb\r\n' > crlf.txt; printf 'a\nb\n' > lf.txt; mkdir d")
    not_found = ('old_string not found in "{}". Make sure it matches the file content exactly, '
                 "including whitespace and indentation.")
    failed(await edit(sandbox_env, file_path="lf.txt", old_string="a\n  b", new_string="c"),
           not_found.format(f"{root}/lf.txt"))
    failed(await edit(sandbox_env, file_path="crlf.txt", old_string="a\nb", new_string="c"),
           not_found.format(f"{root}/crlf.txt") + " The file uses CRLF (\\r\\n) line endings: "
           "where old_string spans lines, it must contain \\r\\n too.")
    failed(await edit(sandbox_env, file_path="lf.txt", old_string="", new_string="c"),
           "old_string is empty. Give the exact text to replace; to create a file or replace "
           "its whole content, use write_file.")
    failed(await edit(sandbox_env, file_path="lf.txt", old_string="a", new_string="a"),
           "old_string and new_string are identical, so the edit would change nothing. Put the "
           "replacement text in new_string.")
    failed(await edit(sandbox_env, file_path="nope.txt", old_string="a", new_string="b"),
           f'File not found: "{root}/nope.txt". Absolute paths are supported; relative paths '
           f"resolve against the workspace ({root}). To create a new file, use write_file.\n"
           f'Deepest existing directory: "{root}" (no similarly named entries).')
    failed(await edit(sandbox_env, file_path="d", old_string="a", new_string="b"),
           f'Cannot edit "{root}/d": it is a directory. Pass the path of a file inside it.')
    failed(await edit(sandbox_env, file_path="lf.txt", new_string="b"),
           'Missing required argument "old_string" for edit_file.')
    assert await sh(sandbox_env, "cat lf.txt") == "a\nb\n"


async def test_edit_crlf_file_with_crlf_old_string(sandbox_env):
    root = ws(sandbox_env)
    await sh(sandbox_env, r"printf 'a\r\nb\r\nc\r\n' > crlf.txt")
    completed(await edit(sandbox_env, file_path="crlf.txt", old_string="a\r\nb",
                         new_string="A\r\nB"),
              f'Replaced 1 occurrence(s) in "{root}/crlf.txt".\n'
              "@@ -1,3 +1,3 @@\n-a\n-b\n+A\n+B\n c")
    assert await sh(sandbox_env, "cat -A crlf.txt") == "A^M$\nB^M$\nc^M$\n"


async def test_edit_through_a_symlink_keeps_the_link(sandbox_env):
    await sh(sandbox_env, "echo old > target.txt; ln -s target.txt link.txt")
    result = await edit(sandbox_env, file_path="link.txt", old_string="old", new_string="new")
    assert result.stop_reason == "completed", result.output
    assert await sh(sandbox_env, "test -L link.txt && cat target.txt") == "new\n"


async def test_edit_outside_what_the_sandbox_user_may_change(docker_env):
    await sh(docker_env, "ln -s /etc/passwd pw")
    failed(await edit(docker_env, file_path="pw", old_string="root:x:", new_string="toor:x:"),
           'Cannot edit "/workspace/pw": permission denied (the sandbox user has no access to '
           "it).")
    assert (await sh(docker_env, "head -c 4 /etc/passwd")) == "root"

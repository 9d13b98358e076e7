"""The pure parts of the file tools: line rendering, name matching, and unified-diff hunks."""

from __future__ import annotations

import difflib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envd.tools import builtin_tools
from envd.tools._files import (
    count_lines,
    diff_opcodes,
    format_hunk,
    group_opcodes,
    probe_hint,
    similar_names,
    split_lines,
)
from envd.tools.edit_file import edit_diff, find_all, replacement_sites
from envd.tools.read_file import continuation_note, line_start, render, render_line, scan
from envd.tools.write_file import change_report

# --- definitions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "permission", "timeout_ms", "max_output", "required"),
    [
        ("read_file", "r", 30_000, 64_000, ["file_path"]),
        ("edit_file", "rw", 30_000, 16_000, ["file_path", "old_string", "new_string"]),
        ("write_file", "rw", 30_000, 16_000, ["file_path", "content"]),
    ],
)
def test_tool_definitions(name, permission, timeout_ms, max_output, required):
    tool = builtin_tools()[name]
    assert (tool.permission, tool.timeout_ms, tool.max_output_length) == (
        permission, timeout_ms, max_output)
    schema = tool.parameters
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["required"] == required
    assert all(prop.get("description") for prop in schema["properties"].values())


# --- text helpers ------------------------------------------------------------------------------


def test_split_and_count_lines():
    assert split_lines("") == [] and count_lines("") == 0
    assert split_lines("a") == ["a"] and count_lines("a") == 1
    assert split_lines("a\n") == ["a\n"] and count_lines("a\n") == 1
    assert split_lines("\n\n") == ["\n", "\n"] and count_lines("\n\n") == 2
    # Only \n ends a line: \r, form feeds and U+2028 stay inside it.
    assert split_lines("a\r\nb\x0cc\u2028d") == ["a\r\n", "b\x0cc\u2028d"]


def test_similar_names_best_first_at_most_eight():
    entries = ["notes.txt", "zzz.py", "notes.md", "NOTE.TXT", "readme"]
    assert similar_names("note.txt", entries) == ["NOTE.TXT", "notes.txt", "notes.md"]
    assert similar_names("config", ["config.yaml", "conf", "other"]) == ["conf", "config.yaml"]
    many = [f"file{i}.txt" for i in range(20)]
    assert len(similar_names("file.txt", many)) == 8
    assert similar_names("x", ["abc", "def"]) == []


def test_probe_hint():
    assert probe_hint("/ws/src/mian.py", "/ws/src", ["main.py", "util.py"]) == (
        'Deepest existing directory: "/ws/src"; similarly named entries there: "main.py".')
    # The name compared is the first missing component under the ancestor.
    assert probe_hint("/ws/sorc/x/y.py", "/ws", ["src", "docs"]) == (
        'Deepest existing directory: "/ws"; similarly named entries there: "src".')
    assert probe_hint("/ws/zz", "/ws", ["a"]) == (
        'Deepest existing directory: "/ws" (no similarly named entries).')


# --- read_file ---------------------------------------------------------------------------------


def test_render_line_numbers_cut_and_crlf():
    assert render_line(7, b"abc", False) == "     7\tabc"
    assert render_line(1234567, b"", False) == "1234567\t"
    assert render_line(1, b"a\r", True) == "     1\ta"
    assert render_line(1, b"a\r", False) == "     1\ta\r"
    cut = "     1\t" + "é" * 2000 + "… [line truncated]"
    assert render_line(1, "é".encode() * 2001, False) == cut
    assert render_line(1, "é".encode() * 2000, False) == "     1\t" + "é" * 2000
    assert render_line(1, b"\xff", False) == "     1\t\ufffd"


def test_scan_keeps_whole_lines_only_when_cut():
    assert scan(b"a\nb", False).lines == 2
    cut = scan(b"a\nb\npartial", True)
    assert (cut.data, cut.lines, cut.complete, cut.overlong) == (b"a\nb\n", 2, False, False)
    long = scan(b"x" * 50, True)
    assert (long.lines, long.overlong) == (1, True)
    assert scan(b"a\r\nb", False).crlf and not scan(b"a\rb\n", False).crlf


def test_line_start_across_blocks():
    data = b"".join(b"%d\n" % i for i in range(100_000))
    for index in (0, 1, 9999, 65_536, 99_999):
        assert data[line_start(data, index):].split(b"\n", 1)[0] == b"%d" % index


def test_render_budget_and_notes():
    scanned = scan(b"".join(b"%03d\n" % i for i in range(1, 11)), False)
    lines, hit = render(scanned, 2, 3, None)
    assert (lines, hit) == (["     3\t003", "     4\t004", "     5\t005"], False)
    # Each line renders as 10 characters: 2 lines and a newline are 21 characters.
    lines, hit = render(scanned, 0, 100, 21)
    assert (len(lines), hit) == (2, True)
    # The first line always goes out, even past the budget.
    assert render(scanned, 0, 100, 1) == (["     1\t001"], True)
    assert continuation_note(scanned, 1, 2, True) == (
        "[file has 10 lines total; showing 1-2 (output limit reached) — call again with "
        "offset to continue]")
    assert continuation_note(scanned, 8, 10, False) is None
    partial = scan(b"a\nb\nc", True)
    assert continuation_note(partial, 1, 2, False) == (
        "[file has more than 2 lines; showing 1-2 — call again with offset to continue]")
    assert continuation_note(scan(b"x" * 10, True), 1, 1, False) is None


# --- diffs -------------------------------------------------------------------------------------


def test_hunk_headers_follow_diff_u():
    assert [format_hunk([], ["a\n", "b\n"], g)
            for g in group_opcodes(diff_opcodes([], ["a\n", "b\n"]))] == [
        "@@ -0,0 +1,2 @@\n+a\n+b"]
    assert [format_hunk(["a\n"], [], g) for g in group_opcodes(diff_opcodes(["a\n"], []))] == [
        "@@ -1,1 +0,0 @@\n-a"]
    a, b = ["x\n", "y"], ["x\n", "y\n"]
    assert [format_hunk(a, b, g) for g in group_opcodes(diff_opcodes(a, b))] == [
        "@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+y"]
    assert group_opcodes(diff_opcodes(["same\n"], ["same\n"])) == []


def test_diff_lines_are_cut_and_crlf_dropped():
    hunk = format_hunk(["a\r\n"], ["b" * 2500 + "\n"], [("replace", 0, 1, 0, 1)])
    assert hunk == "@@ -1,1 +1,1 @@\n-a\n+" + "b" * 2000 + "… [line truncated]"


lines_st = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "\n", "e"]), max_size=40)


@settings(max_examples=200, deadline=None)
@given(lines_st, lines_st)
def test_grouping_matches_difflib(a, b):
    codes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    expected = list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(3))
    assert group_opcodes(codes) == [g for g in expected if any(c[0] != "equal" for c in g)]


def apply_hunks(old: list[str], hunks: list[str]) -> list[str]:
    """A minimal ``patch``: rebuild the new lines from the old ones and the hunks."""
    out: list[str] = []
    pos = 0
    for hunk in hunks:
        head, *body = hunk.split("\n")
        match = re.fullmatch(r"@@ -(\d+),(\d+) \+(\d+),(\d+) @@", head)
        assert match, head
        start = int(match[1]) - 1 if int(match[2]) else int(match[1])
        assert start >= pos
        out.extend(old[pos:start])
        pos = start
        entries: list[list[str]] = []  # [mark, line with its ending]
        for line in body:
            if line == "\\ No newline at end of file":
                entries[-1][1] = entries[-1][1][:-1]
            else:
                entries.append([line[0], line[1:] + "\n"])
        for mark, line in entries:
            if mark in " -":
                assert old[pos] == line
                pos += 1
            if mark in " +":
                out.append(line)
    out.extend(old[pos:])
    return out


texts = st.text(alphabet="ab\nxy", max_size=60)


@settings(max_examples=400, deadline=None)
@given(texts, st.text(alphabet="ab\n", min_size=1, max_size=4), st.text(alphabet="ab\nz",
                                                                        max_size=5))
def test_edit_diff_reproduces_the_new_text(text, old, new):
    if old not in text or old == new:
        return
    new_text = text.replace(old, new)
    diff = edit_diff(text, new_text, old, new, max_hunks=10**6)
    assert diff is not None and diff.hidden_replacements == 0
    rebuilt = "".join(apply_hunks(split_lines(text), diff.hunks))
    assert rebuilt == new_text
    # Fewer hunks allowed: the same first ones, and the rest counted as hidden.
    cut = edit_diff(text, new_text, old, new, max_hunks=1)
    assert cut is not None and cut.hunks == diff.hunks[:1]
    assert (cut.hidden_replacements > 0) == (len(diff.hunks) > 1)


def test_replacement_sites_merge_replacements_sharing_a_line():
    text = "a a\nb\na\n"
    new_text = text.replace("a", "xy")
    sites = list(replacement_sites(text, new_text, find_all(text, "a"), 1, 2))
    assert list(find_all("aaaa", "aa")) == [0, 2]
    assert [(s.old_start, s.old_end, s.new_start, s.new_end, s.replacements) for s in sites] == [
        (0, 4, 0, 6, 2), (6, 8, 8, 11, 1)]
    # An old_string ending in a newline ends its site there, unless the new text does not.
    text = "a\nb\nc\n"
    sites = list(replacement_sites(text, "a\nxc\n", [2], 2, 1))
    assert [(s.old_start, s.old_end, s.new_start, s.new_end) for s in sites] == [(2, 6, 2, 5)]


def test_edit_diff_counts_hidden_replacements():
    text = "".join("TODO\n" if i % 10 == 0 else f"line {i}\n" for i in range(1, 71))
    new_text = text.replace("TODO", "DONE")
    diff = edit_diff(text, new_text, "TODO", "DONE")
    assert diff is not None and len(diff.hunks) == 5 and diff.hidden_replacements == 2
    # Adjacent sites share a hunk: 8 replacements in 4 hunks, 2 shown in the last one.
    text = "".join("T\nT\n" + "x\n" * 7 for _ in range(4))
    diff = edit_diff(text, text.replace("T", "U"), "T", "U", max_hunks=3)
    assert diff is not None and len(diff.hunks) == 3 and diff.hidden_replacements == 2


def test_edit_diff_gives_up_on_too_many_replacements():
    text = "x" * 100
    assert edit_diff(text, "y" * 100, "x", "y", max_work=99) is None
    assert edit_diff(text, "y" * 100, "x", "y", max_work=100) is not None
    # Far-apart sites past the shown hunks are counted, not laid out.
    text = "".join("T\n" + "x\n" * 7 for _ in range(1000))
    diff = edit_diff(text, text.replace("T", "U"), "T", "U", max_work=10)
    assert diff is not None and len(diff.hunks) == 5 and diff.hidden_replacements == 995


def test_change_report_falls_back_to_counts():
    old = b"".join(b"%d\n" % i for i in range(100))
    new = "".join(f"n{i}\n" for i in range(100))
    assert change_report(old, new, 50) == (
        "+100/\u2212100 lines vs the previous content (diff too large to show)")
    assert change_report(b"a\nb\n", "a\nc\n", None) == "@@ -1,2 +1,2 @@\n a\n-b\n+c"

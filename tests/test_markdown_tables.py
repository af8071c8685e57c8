"""Every GitHub-flavoured Markdown table in the repository renders with all its cells.

Why: GitHub drops a table whose delimiter row has another number of cells than its header
(the text shows as a paragraph of pipes), and silently pads or truncates body rows of the
wrong length, so a cell lost to a stray or missing pipe goes unnoticed in review. Cells are
counted as GitHub's parser (cmark-gfm) counts them: leading and trailing pipes are optional,
a backslash escapes the next character (``\\|`` is not a separator, ``\\\\|`` is), and pipes
inside inline code spans split cells unless escaped.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_DELIMITER_CELL = re.compile(r"^\s*:?-+:?\s*$")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
# a line that starts another block ends a table (GFM: blank line or another block-level structure)
_BLOCK_START = re.compile(r"^\s{0,3}(#{1,6}(\s|$)|>|`{3,}|~{3,}|<)")


def split_cells(line: str) -> list[str]:
    """The cells of one table row as GitHub splits them (unescaped pipes separate cells)."""
    text = line.strip()
    cells, current, i = [], [], 0
    separators = []  # positions of unescaped pipes
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i:i + 2])
            i += 2
            continue
        if ch == "|":
            separators.append(i)
            cells.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    cells.append("".join(current))
    if separators and separators[0] == 0:  # optional leading pipe
        cells.pop(0)
    if separators and separators[-1] == len(text) - 1 and cells:  # optional trailing pipe
        cells.pop()
    return [c.strip() for c in cells]


def _unescaped_pipe(line: str) -> bool:
    return re.search(r"(?<!\\)(\\\\)*\|", line) is not None


def looks_like_delimiter(line: str) -> bool:
    """Only pipes, colons, dashes and spaces, with at least one pipe and one dash."""
    s = line.strip()
    return bool(s) and "|" in s and "-" in s and set(s) <= set("|:- \t")


def is_delimiter(line: str) -> bool:
    cells = split_cells(line)
    return looks_like_delimiter(line) and bool(cells) and all(_DELIMITER_CELL.match(c) for c in cells)


def table_problems(text: str) -> list[tuple[int, str]]:
    """(line number, message) for every table row whose cell count differs from its header's,
    and every delimiter-like line that does not follow a header of as many cells."""
    lines = text.splitlines()
    problems: list[tuple[int, str]] = []
    fence = None  # the opening fence while inside a fenced code block
    n = 0
    while n < len(lines):
        line = lines[n]
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip()[len(m.group(1)):].strip():
                fence = None
            n += 1
            continue
        if m:
            fence = m.group(1)
            n += 1
            continue
        nxt = lines[n + 1] if n + 1 < len(lines) else ""
        if line.strip() and _unescaped_pipe(line) and not looks_like_delimiter(line) and looks_like_delimiter(nxt):
            head = len(split_cells(line))
            if not is_delimiter(nxt):
                problems.append((n + 2, f"malformed delimiter row under a header of {head} cells: {nxt.strip()!r}"))
            elif len(split_cells(nxt)) != head:
                problems.append((n + 2, f"delimiter row has {len(split_cells(nxt))} cells, the header {head}: "
                                        "GitHub renders no table"))
            n += 2
            # body rows: up to a blank line or the start of another block (GFM takes any other line as a row)
            while n < len(lines) and lines[n].strip() and not _BLOCK_START.match(lines[n]):
                count = len(split_cells(lines[n]))
                if count != head:
                    problems.append((n + 1, f"body row has {count} cells, the header {head}"))
                n += 1
            continue
        if looks_like_delimiter(line):
            problems.append((n + 1, "delimiter-like row without a table header above it"))
        n += 1
    return problems


def markdown_files() -> list[Path]:
    """Git's tracked Markdown (every *.md of the tree, results/bench/ included), plus the front
    door and docs/ even before they are tracked; outside a Git checkout (an sdist), every *.md."""
    try:
        tracked = subprocess.run(["git", "ls-files", "-z", "*.md"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split("\0")
        paths = {ROOT / p for p in tracked if p}
    except (OSError, subprocess.CalledProcessError):
        paths = {p for p in ROOT.rglob("*.md") if not {".venv", ".git", ".snakemake"} & set(p.parts)}
    paths |= {ROOT / "README.md", ROOT / "CONTRIBUTING.md"} | set((ROOT / "docs").glob("*.md"))
    return sorted(p for p in paths if p.is_file())


# --- the counter itself, on good and bad tables ---------------------------------------------


@pytest.mark.parametrize("row,cells", [
    ("| a | b |", ["a", "b"]),
    ("a | b", ["a", "b"]),
    ("| a | b", ["a", "b"]),
    ("a | b |", ["a", "b"]),
    ("| a \\| b | c |", ["a \\| b", "c"]),  # escaped pipe: one cell
    ("| `x | y` | c |", ["`x", "y`", "c"]),  # a code span does not protect a pipe (GFM)
    ("| `x \\| y` | c |", ["`x \\| y`", "c"]),
    ("| a \\\\| b |", ["a \\\\", "b"]),  # an escaped backslash, then a separator
    ("|  |  |", ["", ""]),
    ("|---|:---:|", ["---", ":---:"]),
])
def test_split_cells(row, cells):
    assert split_cells(row) == cells


def test_good_tables_pass():
    text = "\n".join([
        "| a | b |", "|---|:-:|", "| 1 | 2 |", "| `x \\| y` | 3 |", "",
        "a | b", "--- | ---", "1 | 2", "",
        "```", "| not | a | table |", "|---|", "```",
        "text with | a pipe", "", "- item", "---",
    ])
    assert table_problems(text) == []


@pytest.mark.parametrize("text,line,fragment", [
    ("| a | b |\n|---|---|\n| 1 | 2 | 3 |", 3, "3 cells, the header 2"),
    ("| a | b |\n|---|---|\n| 1 |", 3, "1 cells, the header 2"),
    ("| a | b |\n|---|---|---|\n| 1 | 2 |", 2, "delimiter row has 3 cells"),
    ("| a | b |\n|---|---|\n| `x | y` | 2 |", 3, "3 cells, the header 2"),  # pipe inside code
    ("| a | b |\n|---|---|\n| 1 | 2 |\ntrailing text", 4, "1 cells, the header 2"),  # GFM: a row too
    ("| a | b |\n|--|- -|", 2, "malformed delimiter"),
    ("text\n\n|---|---|\n| 1 | 2 |", 3, "without a table header"),
])
def test_bad_tables_fail(text, line, fragment):
    problems = table_problems(text)
    assert problems and problems[0][0] == line and fragment in problems[0][1], problems


# --- the repository's Markdown ----------------------------------------------------------------


def test_every_markdown_table_renders():
    files = markdown_files()
    assert ROOT / "README.md" in files
    bad = [f"{path.relative_to(ROOT)}:{n}: {message}"
           for path in files for n, message in table_problems(path.read_text(encoding="utf-8"))]
    assert not bad, "Markdown tables that GitHub renders wrong:\n" + "\n".join(bad)

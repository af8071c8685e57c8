"""The README stays a front door, and every relative link in the docs leads somewhere.

Why: the README was 1,253 lines before issue 30 moved its detail into docs/; a front door
grows back unless something counts its lines. Moving text between files breaks relative
links (a README anchor that now lives in a docs page, a path that needs ``../`` from docs/),
and GitHub shows a broken link only when someone clicks it.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); the target may be wrapped in <...>
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "data/README.md"]


def _prose_lines(text: str, keep_code: bool = False):
    """(line number, line) outside fenced code blocks, its code spans removed unless ``keep_code``."""
    fence = None
    for n, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield n, line if keep_code else _CODE_SPAN.sub("", line)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition."""
    out = []
    for n, line in _prose_lines(text):
        out += [(n, m.group(1).strip("<>")) for m in _INLINE_LINK.finditer(line)]
        m = _REFERENCE.match(line)
        if m:
            out.append((n, m.group(1).strip("<>")))
    return out


def is_external(target: str) -> bool:
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) is not None  # http:, https:, mailto:, ...


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger): lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(text, keep_code=True):  # a heading's code span is part of its anchor
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    out |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return out


def test_readme_is_a_front_door():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_docs_index_lists_every_page():
    index = (ROOT / "docs/README.md").read_text(encoding="utf-8")
    listed = {Path(t.split("#")[0]).name for _, t in links(index) if not is_external(t)}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md" and p.name not in listed]
    assert not missing, f"docs/README.md does not link {missing}"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(path):
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    broken = []
    for n, target in links(path.read_text(encoding="utf-8")):
        if is_external(target) or target.startswith("#") or not target:
            continue
        file = unquote(target.split("#", 1)[0])
        if not (path.parent / file).exists():
            broken.append(f"{path.relative_to(ROOT)}:{n}: {target}")
    assert not broken, "relative links to missing files:\n" + "\n".join(broken)


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_anchors_point_to_headings(path):
    """A #fragment into a Markdown file (or the file itself) names one of its headings."""
    broken = []
    for n, target in links(path.read_text(encoding="utf-8")):
        if is_external(target) or "#" not in target:
            continue
        file, fragment = target.split("#", 1)
        dest = path if not file else (path.parent / unquote(file))
        if dest.suffix != ".md" or not dest.is_file():
            continue
        if unquote(fragment) not in anchors(dest.read_text(encoding="utf-8")):
            broken.append(f"{path.relative_to(ROOT)}:{n}: {target}")
    assert not broken, "links to headings that do not exist:\n" + "\n".join(broken)


def test_link_helpers():
    text = "see [a](docs/a.md#x-y), ![i](<img 1.png>), `[no](code.md)`\n[ref]: ../b.md\n```\n[no](c.md)\n```"
    assert links(text) == [(1, "docs/a.md#x-y"), (1, "img 1.png"), (2, "../b.md")]
    assert slug("7b. Calibrated calls, without raters (`relict.calibration`)") == \
        "7b-calibrated-calls-without-raters-relictcalibration"
    assert anchors("# A\n## A\n```\n# B\n```") == {"a", "a-1"}
    assert anchors("## The developer's loop: `make bench-loop`") == {"the-developers-loop-make-bench-loop"}

"""Every file in results/bench/ backs something that names it, and every results/bench/ file that is named
exists (issue 65): a maintainer can tell which result stands behind which sentence, and a superseded result
is deleted rather than left beside the current one.

A name counts where the project's own text holds it: the docs, the tests, the bench scripts, the library,
the Makefile. Shell braces are expanded as a reader's shell would (``local_controls_{ct,mri}.json``,
``real_anatomy_cohort.{json,md}``); names built at run time from a placeholder (``<cohort>``, ``{name}``,
``*``) are patterns, not files."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = "results/bench/"
# where a result may be named: text the project writes itself (not results/, data/ or the demo's outputs)
TEXT_SUFFIXES = {".py", ".md", ".smk", ".yaml", ".yml", ".toml", ".sh", ".txt"}
TEXT_NAMES = {"Makefile", "Snakefile", "run"}
# a path to results/bench/, braces and all, up to the first character no file name here holds
PATH = re.compile(r"results/bench/[A-Za-z0-9_.,{}\-]+")
PATTERN = re.compile(r"[<>*\[\]]|\{[^,{}]*\}")  # <cohort>, [name], *, {name}: built at run time


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    return [f for f in out if f and (ROOT / f).is_file()]


def _texts(files: list[str]) -> dict[str, str]:
    texts = {}
    for f in files:
        path = Path(f)
        if f.startswith(("results/", "data/")) or (path.suffix not in TEXT_SUFFIXES and path.name not in TEXT_NAMES):
            continue
        texts[f] = (ROOT / f).read_text(errors="replace")
    return texts


def expand(text: str) -> list[str]:
    """Shell brace expansion of ``text`` (``a{b,c}d`` -> ``abd``, ``acd``; nested and repeated)."""
    found = re.search(r"\{([^{}]*,[^{}]*)\}", text)
    if not found:
        return [text]
    return [name for alternative in found.group(1).split(",")
            for name in expand(text[:found.start()] + alternative + text[found.end():])]


def named(text: str):
    """``(path, start, end)`` of every results/bench/ file ``text`` names, braces expanded; a name followed by a
    placeholder (``_<cohort>.json``, ``{name}``) is a pattern built at run time, not a file."""
    for hit in PATH.finditer(text):
        following = text[hit.end():hit.end() + 1]
        if following and (following in "<[*" or (following == "{" and not re.match(r"\{[^{}]*,", text[hit.end():]))):
            continue
        for path in expand(hit.group(0).rstrip(".,-")):
            if not PATTERN.search(path) and Path(path).suffix:
                yield path, hit.start(), hit.end()


def test_a_pattern_is_not_a_file_and_a_missing_name_is_found():
    text = "see results/bench/local_{ct,mri}.json, results/bench/x_<cohort>.json and results/bench/y_{name}.json."
    assert [p for p, _, _ in named(text)] == ["results/bench/local_ct.json", "results/bench/local_mri.json"]
    assert [p for p, _, _ in named("at the end: results/bench/z.json")] == ["results/bench/z.json"]


def test_expand_is_a_shells_brace_expansion():
    assert sorted(set(expand("x_{a,b_{c,d}}.json"))) == ["x_a.json", "x_b_c.json", "x_b_d.json"]
    assert expand("r.{json,md}") == ["r.json", "r.md"] and expand("plain.json") == ["plain.json"]
    assert expand("x{,_old}.json") == ["x.json", "x_old.json"]


def test_every_result_in_results_bench_is_named_and_every_named_one_exists():
    files = _tracked()
    texts = _texts(files)
    results = sorted(f for f in files if f.startswith(BENCH))
    assert results, "results/bench/ holds no file: the docs' tables have nothing behind them"
    names = {path for text in texts.values() for path, _, _ in named(text)}
    bare = "\n".join(texts.values())
    unreferenced = [f for f in results if f not in names and Path(f).name not in bare]
    assert not unreferenced, ("results/bench/ files that no doc, test or script names (delete a superseded result; "
                              "git keeps it): " + ", ".join(unreferenced))
    # a page a reader opens names only files that are there (the Makefile's and the scripts' own outputs are
    # written when they run; a page that says a file is not committed says so in words)
    pages = {f: t for f, t in texts.items() if f.endswith(".md")}
    missing = sorted({f"{path} (named in {where})" for where, text in pages.items() for path, a, b in named(text)
                      if not (ROOT / path).exists() and "not committed" not in text[max(0, a - 200):b + 200]})
    assert not missing, "pages name results/bench/ files that do not exist: " + ", ".join(missing)


def test_no_bench_script_is_longer_than_a_reader_can_hold():
    """Issue 65: no bench script over 500 lines (a script that grows past it splits by what it measures)."""
    long = {f: n for f in _tracked() if f.startswith("bench/") and f.endswith((".py", ".sh"))
            if (n := len((ROOT / f).read_text().splitlines())) > 500}
    assert not long, long

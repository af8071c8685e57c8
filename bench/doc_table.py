"""A bench's table in a docs page, written from its committed JSON between two markers: one rule for the
benches that keep a page's numbers generated, never typed (``<bench>.py doc [--write]``).

Why one module: each bench had its own copy of the splice, the write and the "differs, run --write" check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


def page_with_table(page: str, markers: tuple[str, str], table: str) -> str:
    """``page`` with the text between the two markers replaced by ``table`` (one line break either side)."""
    start, end = page.index(markers[0]) + len(markers[0]), page.index(markers[1])
    return page[:start] + "\n" + table + "\n" + page[end:]


def doc(page: str, result: str, markers: tuple[str, str], render: Callable[[dict], str], write: bool,
        command: str) -> int:
    """Write (``write``) or check the table of ``page`` (relative to the checkout) rendered from ``result``'s
    JSON; 1 with a message naming ``command`` where the page differs."""
    text = (ROOT / page).read_text()
    new = page_with_table(text, markers, render(json.loads((ROOT / result).read_text())))
    if write:
        (ROOT / page).write_text(new)
        return 0
    if new != text:
        print(f"{page}'s table differs from {result}: run `{command}`", file=sys.stderr)
        return 1
    return 0


def cli(argv, description: str, result: str, render: Callable[[dict], str], doc: Callable[[bool], int],
        add_compute_args: Callable, compute: Callable) -> int:
    """A table bench's two commands: ``compute`` (``add_compute_args(parser)`` adds its options; ``compute(args)``
    gives the result, written to ``--out``, default ``result``, and printed as the page's table) and
    ``doc [--write]`` (``doc(write)``)."""
    import argparse

    from synthaudit.io import write_json

    ap = argparse.ArgumentParser(description=description)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compute")
    add_compute_args(c)
    c.add_argument("--out", default=str(ROOT / result))
    sub.add_parser("doc").add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "doc":
        return doc(args.write)
    res = compute(args)
    write_json(args.out, res)
    print(render(res))
    print(f"written: {args.out}")
    return 0


def root_option(parser) -> None:
    """``compute --root``: the checkout whose ``make demo`` a bench reads (default: this one)."""
    parser.add_argument("--root", type=Path, default=ROOT, help="a checkout whose make demo has run")

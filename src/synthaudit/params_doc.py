"""docs/params.md, rendered from the params schema: every key, its default, what it allows and means.

Why rendered: the schema is the one source of each parameter's default and description
(:func:`synthaudit.config.fill_defaults`); a hand-written table would be a second one.
``python -m synthaudit.params_doc docs/params.md`` rewrites it; a test fails when it is stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .config import _object_schema, _resolve, load_schema

TOP = ("datasets", "relict", "fidelity", "membership", "privacy", "anonymise", "feature_study", "generator_sweep", "compute")


def _allowed(node: dict, root: dict) -> str:
    """What a key accepts, in words: its type or enum and its bounds (one level of anyOf)."""
    parts = []
    alts = node.get("anyOf") or node.get("oneOf")
    for n in (alts if alts else [node]):
        n = {**_resolve(n, root), **{k: v for k, v in n.items() if k != "$ref"}}
        if "const" in n:
            parts.append(json.dumps(n["const"]))
            continue
        if "enum" in n and n["enum"]:
            parts.append(" \\| ".join(json.dumps(v) for v in n["enum"]))
            continue
        t = n.get("type", "object" if "properties" in n else "")
        t = " or ".join(t) if isinstance(t, list) else t
        if t == "array" and isinstance(n.get("items"), dict):
            inner = _allowed(n["items"], root)
            t = f"list of {inner}" if inner else "list"
        bounds = [f"{sym} {n[k]}" for k, sym in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                  ("maximum", "<="), ("exclusiveMaximum", "<")) if k in n]
        parts.append(" ".join([t] + ([", ".join(bounds)] if bounds else [])).strip())
    return " or ".join(p for p in parts if p)


def _rows(node, root: dict, path: str, out: list) -> None:
    obj = _object_schema(node, root)
    if obj is None:
        return
    for key, sub in obj.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        default = json.dumps(sub["default"]) if isinstance(sub, dict) and "default" in sub else ""
        if isinstance(sub, dict) and sub.get("x-names-datasets"):
            default += " (names datasets: the demo's params.yaml sets its own)"
        desc = (sub.get("description") or "").replace("|", "\\|").replace("\n", " ") if isinstance(sub, dict) else ""
        out.append(f"| `{here}` | {default.replace('|', chr(92) + '|')} | {_allowed(sub, root)} | {desc} |")
        _rows(sub, root, here, out)
    extra = obj.get("additionalProperties")
    if isinstance(extra, dict):
        _rows(extra, root, f"{path}.<name>", out)


def render(schema: dict | None = None) -> str:
    """The whole page (Markdown)."""
    schema = schema or load_schema()
    lines = ["# Parameters (params.yaml)", "",
             "Rendered from `workflow/schemas/params.schema.yaml` by `python -m synthaudit.params_doc docs/params.md`",
             "(a test fails when this page is stale). The schema is the one source of every default:",
             "`synthaudit.config.fill_defaults` fills a key you leave out, where its block is present;",
             "a block with no default (`privacy`, `anonymise`, `feature_study`, `generator_sweep`) left out",
             "switches its stage off. `params.yaml` repeats the defaults with comments (a test checks they",
             "agree), except where it names the demo's datasets. Measure names come from the registry",
             "(`synthaudit.registry`). `compute` is a runtime setting DVC does not track.", ""]
    for top in TOP:
        node = schema["properties"][top]
        lines += [f"## `{top}`", "", (node.get("description") or "").strip(), "",
                  "| key | default | allowed | meaning |", "|---|---|---|---|"]
        out: list[str] = []
        _rows(node, schema, top, out)
        lines += out + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

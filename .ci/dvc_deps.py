"""dvc.yaml's code deps, from what each stage runs: its rule files, the scripts their rules call, and
every synthaudit module those scripts and the plan (common.smk) import, file by file.

Why generated: a stage must re-run when code it runs changes, and only then. Whole folders as deps
re-ran every stage on a docstring edit anywhere in them; a hand-kept list of modules goes stale on
the next import. ``python .ci/dvc_deps.py --write`` rewrites the deps (comments kept);
``--check`` (tests/test_dvc_stages.py) fails when dvc.yaml differs from what the code imports.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "src" / "synthaudit"
# rules that live in one stage's rule file but run in another stage's target
RUN_BY = {"feature_study": "feature_study", "feature_study_table": "feature_study", "generator_sweep": "figures",
          "ldm_losses": "figures"}
PLAN_FILES = [ROOT / "workflow/rules/common.smk"]  # parsed by every stage's Snakemake run
MODULE_NAME = re.compile(r"synthaudit(\.[A-Za-z_]\w*)+")  # a string naming one of the library's modules
SCHEMA = "workflow/schemas/params.schema.yaml"  # every parameter's default (synthaudit.config.fill_defaults)


def rule_blocks(smk: Path):
    text = smk.read_text()
    parts = re.split(r"^rule (\w+):\n", text, flags=re.M)
    for name, body in zip(parts[1::2], parts[2::2]):
        yield name, re.split(r"^\S", body, maxsplit=1, flags=re.M)[0]


def _candidates(base: Path, parts: list[str]) -> list[Path]:
    t = base.joinpath(*parts) if parts else base
    return [c for c in (t.with_suffix(".py"), t / "__init__.py") if c.is_file()]


def library_files(path: Path, seen: set[Path]) -> None:
    """Every synthaudit module ``path`` imports, transitively (module-level and inside functions;
    a package's __init__ too, which Python runs first; a module named in a string, which importlib
    loads later)."""
    if path in seen:
        return
    seen.add(path)
    text = path.read_text()
    try:
        tree = ast.parse(text)
    except SyntaxError:  # a .smk file: read its import lines only
        tree = ast.parse("\n".join(line.strip() for line in text.splitlines()
                                   if re.match(r"\s*(from synthaudit|import synthaudit)", line)))
    for node in ast.walk(tree):
        found: list[Path] = []
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "synthaudit":
                    found += _candidates(LIB, a.name.split(".")[1:])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                mod = (node.module or "").split(".") if node.module else []
            elif (node.module or "").split(".")[0] == "synthaudit":
                base, mod = LIB, node.module.split(".")[1:]
            else:
                continue
            found += _candidates(base, mod)
            for a in node.names:
                found += _candidates(base, mod + [a.name])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value):
            # a module named in a string and imported when first needed (the extractor registry's built-ins)
            found += _candidates(LIB, node.value.split(".")[1:])
        for f in found:
            # the packages above a module run first
            p = f.parent
            while p != LIB.parent and (p / "__init__.py").is_file():
                library_files(p / "__init__.py", seen)
                p = p.parent
            library_files(f, seen)


def stage_code(stage: str, spec: dict, stages: dict) -> list[str]:
    """The stage's code deps: rule files, their scripts, and the modules imported."""
    smk = [d for d in spec.get("deps", []) if isinstance(d, str) and d.endswith(".smk")]
    script = re.compile(r"\"\.\./scripts/([\w/]+\.py)\"")
    scripts = set()
    for other, other_spec in stages.items():
        for f in [d for d in other_spec.get("deps", []) if isinstance(d, str) and d.endswith(".smk")]:
            text = (ROOT / f).read_text()
            moved = {name: set(script.findall(body)) for name, body in rule_blocks(ROOT / f) if name in RUN_BY}
            rest = set(script.findall(re.sub(r"^rule (%s):\n(?:[ \t]+.*\n|\n)*" % "|".join(moved) if moved else "(?!x)x",
                                             "", text, flags=re.M)))
            if other == stage:
                scripts |= {f"workflow/scripts/{x}" for x in rest}
            for name, found in moved.items():
                if RUN_BY[name] == stage:
                    scripts |= {f"workflow/scripts/{x}" for x in found}
    seen: set[Path] = set()
    for f in sorted(scripts) + [str(p.relative_to(ROOT)) for p in PLAN_FILES]:
        library_files(ROOT / f, seen)
    modules = sorted(str(p.relative_to(ROOT)) for p in seen
                     if p.suffix == ".py" and LIB in p.parents and "_workflow" not in p.parts)
    rules = sorted(set(smk) | {str(p.relative_to(ROOT)) for p in PLAN_FILES}) + [SCHEMA]
    return rules + sorted(scripts) + modules


def _is_code(dep: str) -> bool:
    return dep.endswith(".smk") or dep.startswith(("workflow/scripts/", "src/")) or dep == SCHEMA


def expected(dvc: dict) -> dict[str, list[str]]:
    """stage -> its deps: the data and other non-code deps as written, then the code deps."""
    stages = dvc["stages"]
    return {s: [d for d in spec.get("deps", []) if not _is_code(d)] + stage_code(s, spec, stages)
            for s, spec in stages.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite dvc.yaml's deps")
    args = ap.parse_args(argv)
    import yaml

    path = ROOT / "dvc.yaml"
    want = expected(yaml.safe_load(path.read_text()))
    if not args.write:
        have = {s: spec.get("deps", []) for s, spec in yaml.safe_load(path.read_text())["stages"].items()}
        diff = {s: sorted(set(want[s]) ^ set(have.get(s, []))) for s in want if set(want[s]) != set(have.get(s, []))}
        for s, d in diff.items():
            print(f"stage {s}: differs in {d}")
        return 1 if diff else 0
    sys.path.insert(0, str(ROOT / "src"))
    from synthaudit.workspace import dump_round_trip, load_round_trip
    from ruamel.yaml.comments import CommentedSeq

    doc = load_round_trip(path.read_text())
    for s, deps in want.items():
        doc["stages"][s]["deps"] = CommentedSeq(deps)
    path.write_text(dump_round_trip(doc))
    print(f"dvc.yaml: {sum(len(d) for d in want.values())} deps over {len(want)} stages")
    return 0


if __name__ == "__main__":
    sys.exit(main())

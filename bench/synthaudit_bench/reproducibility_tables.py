"""docs/reproducibility.md's measured tables, written from the benchmarks' JSON, not typed in.

    PYTHONPATH=bench python -m synthaudit_bench.reproducibility_tables --write

Blocks: ``numerics-cost`` (results/bench/numerics_cost_demo.json: the demo's jobs, portable
against native), ``numerics-cost-ncct`` (results/bench/numerics_cost_ncct.json: the image level
at RELICT's NCCT size) and ``seed-spread`` (results/bench/seed_spread.json: each trained estimate's
headline metrics over seeds). tests/test_reproducibility_doc.py checks the committed page
against the committed JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path("docs/reproducibility.md")
COST = Path("results/bench/numerics_cost_demo.json")
COST_NCCT = Path("results/bench/numerics_cost_ncct.json")
SPREAD = Path("results/bench/seed_spread.json")

# the headline keys per metrics file (a metric's full set of moved keys is in the JSON)
HEADLINES = {
    "relict.json": re.compile(r"^[^.]+\.[a-z_]+\.(balanced_accuracy|auc|calibrated_n_called)$|^ncct_ldm\.[a-z_]+\.min_score$"),
    "copies.json": re.compile(r"^[^.]+\.(n_copies|sensitivity|specificity)$"),
    "privacy.json": re.compile(r"^[^.]+\.[a-z]+\.(verification_auc|specificity|synthetic\.[^.]+\.flag_rate)$"),
    "recall.json": re.compile(r"^[^.]+\.(recall|learned_fraction)$"),
    "anonymise.json": re.compile(r"^[^.]+\.[^.]+\.(D|auc)$"),
}
ESTIMATE_NAMES = {"unet": "U-Net labels", "ldm": "latent diffusion model", "filters": "privacy filters",
                  "cvae": "CVAE and probes"}


def cost_table(cost: dict, top: int = 10) -> str:
    lines = ["| rule (the demo's jobs) | portable (s) | native (s) | portable / native |", "|---|---:|---:|---:|"]
    for rule, r in list(cost["rules"].items())[:top]:
        lines.append(f"| `{rule}` | {r['portable_s']:.1f} | {r['native_s']:.1f} | {r['ratio']:.2f} |")
    t = cost["total"]
    lines.append(f"| every job | {t['portable_s']:.0f} | {t['native_s']:.0f} | {t['ratio']:.2f} |")
    if "wall" in cost:
        w = cost["wall"]
        lines.append(f"| `make demo`, wall | {w['portable_s']:.0f} | {w['native_s']:.0f} | {w['ratio']:.2f} |")
    return "\n".join(lines)


def ncct_cost_table(cost: dict) -> str:
    c = cost["cohort"]
    shape = " x ".join(map(str, c["shape"]))
    lines = [f"The image level at RELICT's NCCT size ({c['n_synthetic']} synthetic x {c['n_training']} training "
             f"volumes of {shape}, {cost['threads']} threads, `--scale {cost['scale']}`), fastest of "
             f"{cost['repeats']} alternating runs per mode:", "",
             "| measure | portable (ms per pair) | native (ms per pair) | portable / native |", "|---|---:|---:|---:|"]
    for measure, r in cost["measures"].items():
        lines.append(f"| {measure} | {r['portable_ms_per_pair']:.2f} | {r['native_ms_per_pair']:.2f} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def _num(x) -> str:
    if x is None:
        return "–"
    return f"{x:.0f}" if float(x).is_integer() and abs(x) >= 1 else f"{x:.3g}"


def spread_table(spread: dict) -> str:
    lines = [f"Seeds per model: {spread['seeds']}. Only metrics that moved with the seed are listed; the "
             "others do not depend on that model.", "",
             "| model (seed parameter) | metric | demo | mean | SD | min – max |", "|---|---|---:|---:|---:|---|"]
    for estimate, entry in spread["estimates"].items():
        name = f"{ESTIMATE_NAMES.get(estimate, estimate)} (`{entry['param']}`)"
        for file, keys in entry["metrics"].items():
            pattern = HEADLINES.get(file)
            for key, s in keys.items():
                if pattern is None or not pattern.match(key):
                    continue
                lines.append(f"| {name} | {file} `{key}` | {_num(s.get('demo'))} | {_num(s['mean'])} | "
                             f"{_num(s['sd'])} | {_num(s['min'])} – {_num(s['max'])} |")
                name = ""
    return "\n".join(lines)


SOURCES = {"numerics-cost": COST, "numerics-cost-ncct": COST_NCCT, "seed-spread": SPREAD}
COMMAND = "python -m synthaudit_bench.reproducibility_tables --write"


def replace(text: str, generated: dict[str, str]) -> str:
    """``text`` with each marked block rewritten (bench/doc_table.py's splice); a missing marker is an error."""
    import doc_table  # bench/doc_table.py, beside this package

    for name, body in generated.items():
        head = f"<!-- {name}: written by `{COMMAND}` from {SOURCES[name].as_posix()} -->"
        text = doc_table.page_with_table(text, (head, f"<!-- /{name} -->"), body)
    return text


def tables(root: Path = ROOT) -> dict[str, str]:
    return {"numerics-cost": cost_table(json.loads((root / COST).read_text())),
            "numerics-cost-ncct": ncct_cost_table(json.loads((root / COST_NCCT).read_text())),
            "seed-spread": spread_table(json.loads((root / SPREAD).read_text()))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite the blocks of {TARGET} in place")
    args = ap.parse_args(argv)
    generated = tables()
    if args.write:
        page = ROOT / TARGET
        page.write_text(replace(page.read_text(encoding="utf-8"), generated), encoding="utf-8")
    else:
        print("\n\n".join(generated.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

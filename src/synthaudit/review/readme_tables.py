"""The demo's results tables (docs/demo_results.md), written from the committed metrics instead of typed in.

Why: typed numbers went stale every time the demo changed (issue 30 found 199 moved values),
and a reader could not tell which run they came from. The tables sit between markers in
docs/demo_results.md (in README.md until the README became a short front door, issue 30);
``--write`` replaces them from ``results/metrics/{relict,copies,membership}.json`` and a test
(tests/test_readme_tables.py) checks that the committed page and the committed metrics agree.

    python -m synthaudit.review.readme_tables --write   # after `make demo`: docs/demo_results.md
    python -m synthaudit.review.readme_tables --write OTHER.md   # any file with the markers
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from .. import registry

DATASETS = ["ncct_demo", "ncct_demo_hard", "tof_demo", "tof_demo_batch2", "ncct_demo_aug"]
MEASURES = registry.names()  # the columns: every whole-volume measure, then the aligned variants
ALIGNED = [f"{m}_aligned" for m in registry.alignable()]
# the page that holds the marked tables, relative to the repository root
TARGET = Path("docs/demo_results.md")


def _pair(a, b) -> str:
    if a is None or b is None:
        return "–"
    return f"{a:.2f} / {b:.2f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join([_row(head), "|" + "---|" * len(head)] + [_row(r) for r in rows])


def rating_table(relict: dict) -> str:
    """Balanced accuracy / AUC against each spiked set's truth, per dataset and measure."""
    measures = MEASURES + ALIGNED
    rows = []
    for d in DATASETS:
        if d not in relict:
            continue
        m = relict[d]
        rows.append([d] + [_pair(m[k].get("balanced_accuracy"), m[k].get("auc")) if k in m else "–"
                           for k in measures])
    return _table(["dataset"] + measures, rows)


def calibrated_table(relict: dict, copies: dict) -> str:
    """Calibrated calls: sensitivity / specificity per measure, the combined call, Dar et al.'s numbers."""
    measures = MEASURES + ALIGNED
    rows = []
    for d in DATASETS:
        if d not in relict:
            continue
        m, c = relict[d], copies.get(d, {})
        cells = [_pair(m[k].get("calibrated_sensitivity"), m[k].get("calibrated_specificity")) if k in m else "–"
                 for k in measures]
        combined = _pair(c.get("sensitivity"), c.get("specificity"))
        dar = (f"{c['percent_synthetic_copies']:.0f} % / {c['percent_patients_copied']:.0f} %"
               if "percent_synthetic_copies" in c else "–")
        rows.append([d] + cells + [combined, dar])
    return _table(["dataset"] + measures + ["combined", "copies / patients copied"], rows)


def _share(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def local_table(copies: dict) -> str:
    """The local level per dataset (relict.local): volumes called, the held-out scans' own rate when left
    out, and the positive controls called per cube side (the most distinctive third in brackets) beside
    the whole-volume RMSE ratio's calls of the same controls."""
    sizes = sorted({int(k.split("_")[2].removesuffix("mm")) for c in copies.values() for k in c
                    if k.startswith("local_control_") and k.endswith("mm_sensitivity")})
    rows = []
    for d in [*DATASETS, *sorted(set(copies) - set(DATASETS))]:
        c = copies.get(d, {})
        if "local_n_called" not in c:
            continue
        cells = []
        for s in sizes:
            hit = c.get(f"local_control_{s}mm_sensitivity")
            high = c.get(f"local_control_{s}mm_distinctive_sensitivity")
            whole = c.get(f"local_control_{s}mm_whole_volume_rmse_sensitivity")
            cells.append("–" if hit is None else f"{_share(hit)} ({_share(high)}) / {_share(whole)}")
        rows.append([d, str(c["local_n_called"]), _share(c.get("local_heldout_false_positive_rate"))] + cells)
    return _table(["dataset", "volumes called", "held-out called (left out)"]
                  + [f"{s} mm controls: local (distinctive third) / whole-volume RMSE" for s in sizes], rows)


def membership_table(membership: dict) -> str:
    """Each set's membership attacks (synthaudit.membership): the patients on each side, each attack's AUC with
    its patient-bootstrap interval."""
    attacks = list(dict.fromkeys(k for m in membership.values() for k, v in m.items() if isinstance(v, dict)))
    rows = []
    for d, m in membership.items():
        cells = [f"{m[a]['auc']:.2f} [{m[a]['auc_ci_low']:.2f}, {m[a]['auc_ci_high']:.2f}]" if a in m else "–"
                 for a in attacks]
        rows.append([d, f"{m['members']} / {m['nonmembers']}"] + cells)
    return _table(["dataset", "member / non-member patients"] + [f"{a}: AUC [95 % CI]" for a in attacks], rows)


def tables(metrics_dir: Path) -> dict[str, str]:
    relict = json.loads((metrics_dir / "relict.json").read_text())
    copies = json.loads((metrics_dir / "copies.json").read_text())
    out = {"demo-rating": rating_table(relict), "demo-calibrated": calibrated_table(relict, copies),
           "demo-local": local_table(copies)}
    membership = metrics_dir / "membership.json"
    if membership.is_file():
        out["demo-membership"] = membership_table(json.loads(membership.read_text()))
    return out


def block(name: str, body: str, target: Path | str = TARGET) -> str:
    return (f"<!-- {name}: written by `python -m synthaudit.review.readme_tables --write {Path(target).as_posix()}` "
            f"from results/metrics/ -->\n{body}\n<!-- /{name} -->")


def replace(text: str, generated: dict[str, str], target: Path | str = TARGET) -> str:
    """``text`` with each marked block replaced; a missing marker is an error (nothing silently skipped).
    ``target``: the file's path as the markers name it (the command that rewrites them)."""
    for name, body in generated.items():
        pattern = re.compile(rf"<!-- {re.escape(name)}:.*?-->\n.*?<!-- /{re.escape(name)} -->", re.S)
        if not pattern.search(text):
            raise ValueError(f"{Path(target).as_posix()} has no block <!-- {name}: ... --> ... <!-- /{name} -->")
        text = pattern.sub(lambda _: block(name, body, target), text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, nargs="?", const=TARGET,
                    help=f"update the marked tables of this file in place (default: {TARGET}); "
                         "without --write the tables are printed")
    ap.add_argument("--metrics", type=Path, default=Path("results/metrics"))
    args = ap.parse_args(argv)
    generated = tables(args.metrics)
    if args.write:
        # the markers name the command that rewrites them: the default page by its repository path
        named = TARGET if args.write.resolve() == TARGET.resolve() else args.write
        args.write.write_text(replace(args.write.read_text(encoding="utf-8"), generated, named), encoding="utf-8")
        print(f"updated {', '.join(generated)} in {args.write}")
    else:
        print("\n\n".join(generated.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

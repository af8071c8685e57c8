"""Command line: ``python -m synthaudit {validate,where}``.

Why: a user should be able to check a params file without starting Snakemake, and
to find the results of a finished run without knowing the layout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import ParamsError, load_params


def _validate(args) -> int:
    try:
        params = load_params(args.params)
    except ParamsError as e:
        print(e, file=sys.stderr)
        return 2
    from .config import resolve_datasets, with_sweep
    from .sources import SourceError, plan_dataset

    try:  # as the workflow does: training_from entries read their training side from the named dataset
        for name, ds in resolve_datasets(with_sweep(params)).items():
            p = plan_dataset(name, ds)
            print(f"{name}: {len(p.train)} training, {len(p.heldout)} held-out, "
                  f"{len(p.synthetic)} synthetic volumes")
    except SourceError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"{args.params}: valid")
    return 0


def _where(args) -> int:
    root = Path(args.root)
    params = load_params(root / "params.yaml")
    metrics = root / "results/metrics/relict.json"
    print("\nsynthaudit results")
    for d in params["datasets"]:
        print(f"  [{d}]")
        rankings = sorted((root / "results/relict" / d).glob("ranking_*.tsv"))
        for path in rankings:  # the measures this dataset was ranked by (its own list, its levels)
            m = path.stem.removeprefix("ranking_")
            print(f"    ranking ({m}):{' ' * max(1, 16 - len(m))}{path.relative_to(root)}")
        if not rankings:
            print("    rankings:         not computed yet")
        print(f"    figures:          results/figures/{d}/")
        print(f"    registration QC:  results/preprocessed/{d}/qc.tsv, qc_montage.png")
    print(f"  metrics:            {metrics.relative_to(root)}")
    print("  report:             results/report.html")
    if metrics.is_file():
        data = json.loads(metrics.read_text())
        for d, per in data.items():
            for m, e in per.items():
                if "balanced_accuracy" in e:
                    print(f"    {d:>12} {m:>5}: balanced accuracy {_f(e['balanced_accuracy'])} at threshold "
                          f"{_f(e['threshold'])} (sensitivity {_f(e['sensitivity'])}, specificity "
                          f"{_f(e['specificity'])}, AUC {_f(e['auc'])})")
    copies = root / "results/metrics/copies.json"
    if copies.is_file():  # calibrated calls against the held-out scans, combined over the measures
        print(f"  calibrated copies:  {copies.relative_to(root)}, results/relict/<dataset>/copies.tsv")
        for d, c in json.loads(copies.read_text()).items():
            print(f"    {d:>12}: {c['n_copies']} synthetic volume(s) called copies at a false-positive rate of "
                  f"{c['rate']:g} ({_pct(c.get('percent_synthetic_copies'))}), {c['n_patients_copied']} training "
                  f"patient(s) copied ({_pct(c.get('percent_patients_copied'))}); {c['n_heldout']} held-out scans")
    privacy = root / "results/metrics/privacy.json"
    if privacy.is_file():
        print(f"  privacy filters:    {privacy.relative_to(root)}, results/privacy/<training set>/<space>/")
        for owner, spaces in json.loads(privacy.read_text()).items():
            for space, e in spaces.items():
                if not isinstance(e, dict):
                    continue
                flagged = ", ".join(f"{n} {_f(x['flag_rate'])}" for n, x in e["synthetic"].items())
                print(f"    {owner:>12} {space:>6}: verification AUC {_f(e['verification_auc'])}, specificity "
                      f"{_f(e['specificity'])}, flag rate {flagged}")
    return 0


def _f(v) -> str:
    return "NA" if v is None else f"{v:.3f}"


def _pct(v) -> str:
    return "NA" if v is None else f"{v:.1f} %"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="synthaudit", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate", help="check params.yaml and the datasets it names")
    v.add_argument("params", nargs="?", default="params.yaml")
    v.set_defaults(func=_validate)
    w = sub.add_parser("where", help="print where the results of a run are")
    w.add_argument("--root", default=".")
    w.set_defaults(func=_where)
    args = ap.parse_args(argv)
    return args.func(args)

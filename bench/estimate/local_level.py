"""init's estimate of the local level against the job's own benchmark file (issue 47), per workspace:

    synthaudit init WS ...                                    # times the unit costs on the samples
    (cd WS && snakemake --cores 2 results/relict/audit/local/local.json)
    python bench/estimate/local_level.py WS [WS ...] --out results/bench/estimate_local_level.json

The estimate is recomputed from the unit costs init measured (data/estimate.json) with the current model
(``workspace.estimate.local_seconds``), the counts from the workspace's manifest and params.yaml.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import yaml

from synthaudit.review.tables import read_benchmark
from synthaudit.workspace.estimate import local_seconds
from synthaudit.workspace.timing import Costs


def row(ws: Path) -> dict:
    est = json.loads((ws / "data/estimate.json").read_text())
    roles = [r["role"] for r in csv.DictReader(open(ws / "data/manifest.tsv"), delimiter="\t")]
    params = yaml.safe_load((ws / "params.yaml").read_text())
    sizes = params.get("relict", {}).get("local", {}).get("controls", {}).get("sizes_mm", [20, 30, 40])
    n_syn = len(list((ws / "results/synthetic/audit/images").glob("*.nii.gz")))
    n_train, n_held = roles.count("train"), roles.count("heldout")
    estimated = local_seconds(Costs(**est["costs"]), n_train, n_syn, n_held, len(sizes))
    measured = read_benchmark(ws / "benchmarks/relict_local/audit.tsv")["s"]
    shape = json.loads((ws / "results/preprocessed/audit/grid.json").read_text()).get("shape")
    return {"workspace": str(ws), "shape": shape, "n_train": n_train, "n_heldout": n_held, "n_synthetic": n_syn,
            "control_sizes": len(sizes), "costs": {k: est["costs"][k] for k in ("read_s", "smooth_s", "local_pair_s",
                                                                              "control_s")},
            "estimated_s": round(estimated, 2), "measured_s": round(float(measured), 2),
            "ratio": round(float(measured) / estimated, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workspaces", nargs="+", type=Path)
    ap.add_argument("--out", default="results/bench/estimate_local_level.json")
    args = ap.parse_args(argv)
    rows = [row(ws) for ws in args.workspaces]
    for r in rows:
        print(f"| {' x '.join(map(str, r['shape']))} | {r['n_train']} / {r['n_heldout']} / {r['n_synthetic']} | "
              f"{r['estimated_s']} | {r['measured_s']} | {r['ratio']:.2f} |")
    out = Path(args.out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    tmp.replace(out)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

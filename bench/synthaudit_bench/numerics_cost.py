"""What portable numerics cost: the same demo run twice, portable and native, job by job.

Why: ``SYNTHAUDIT_NUMERICS=portable`` (the default) caps oneDNN at AVX2 and runs MKL's
COMPATIBLE branch, AVX2 code in ATen and numba, and numpy without AVX-512 (synthaudit.numerics);
a user deciding whether to lift it needs to know where the time goes. Snakemake's
``benchmark:`` files give every job's wall time; this sums them per rule for two finished
runs (two checkouts where ``make demo`` ran, one with ``SYNTHAUDIT_NUMERICS=native``) and
writes the ratio per rule and in total.

    git clone . /tmp/portable && (cd /tmp/portable && make demo)
    git clone . /tmp/native && (cd /tmp/native && SYNTHAUDIT_NUMERICS=native make demo)
    PYTHONPATH=bench python -m synthaudit_bench.numerics_cost /tmp/portable /tmp/native \\
        --out results/bench/numerics_cost_demo.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from synthaudit.io import write_json


def job_seconds(run: Path) -> dict[str, float]:
    """Wall seconds per rule: the sum over its jobs' benchmark files (``benchmarks/<rule>/...``, read as the
    verdict reads them: ``synthaudit.review.tables.read_benchmark``)."""
    from synthaudit.review.tables import read_benchmark

    out: dict[str, float] = {}
    for tsv in sorted((run / "benchmarks").rglob("*.tsv")):
        rule = tsv.relative_to(run / "benchmarks").parts[0]
        out[rule] = out.get(rule, 0.0) + read_benchmark(tsv)["s"]
    return out


def compare(portable: Path, native: Path) -> dict:
    a, b = job_seconds(portable), job_seconds(native)
    rules = sorted(set(a) & set(b), key=lambda r: -a[r])
    per_rule = {r: {"portable_s": round(a[r], 2), "native_s": round(b[r], 2),
                    "ratio": round(a[r] / b[r], 2) if b[r] > 0 else None} for r in rules}
    total_a, total_b = sum(a[r] for r in rules), sum(b[r] for r in rules)
    return {"rules": per_rule, "total": {"portable_s": round(total_a, 1), "native_s": round(total_b, 1),
                                         "ratio": round(total_a / total_b, 2)},
            "definitions": {"portable_s": "sum of the rule's jobs' wall seconds (Snakemake benchmark files), "
                                          "SYNTHAUDIT_NUMERICS=portable",
                            "native_s": "the same with SYNTHAUDIT_NUMERICS=native",
                            "total": "over the rules both runs have (job seconds, not the run's wall time: "
                                     "two jobs run at once on two cores)"}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("portable", type=Path, help="a checkout where the demo ran with portable numerics")
    ap.add_argument("native", type=Path, help="a checkout where it ran with SYNTHAUDIT_NUMERICS=native")
    ap.add_argument("--wall", nargs=2, type=float, metavar=("PORTABLE_S", "NATIVE_S"),
                    help="the two runs' wall times (make demo), recorded beside the job sums")
    ap.add_argument("--out", type=Path, default=Path("results/bench/numerics_cost_demo.json"))
    args = ap.parse_args(argv)
    result = compare(args.portable, args.native)
    if args.wall:
        result["wall"] = {"portable_s": args.wall[0], "native_s": args.wall[1],
                          "ratio": round(args.wall[0] / args.wall[1], 2)}
    write_json(args.out, result)
    from .reproducibility_tables import cost_table

    print(cost_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

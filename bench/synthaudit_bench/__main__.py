"""Command line: ``python -m synthaudit_bench --scale quick`` (``make bench-quick``, ``make bench``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .params import MEASURES, BenchParamsError, load

PARAMS = "bench/params.yaml"  # the scales


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m synthaudit_bench",
        description="Time the all-pairs RELICT measures on simulated cohorts at the paper's sizes, "
                    "compare them with naive per-pair code, and check the targets.")
    parser.add_argument("--scale", nargs="+", metavar="NAME", required=True,
                        help=f"scale(s) from {PARAMS}, e.g. quick, ncct, tof")
    parser.add_argument("--out", default="results/bench", help="results folder (default: %(default)s)")
    parser.add_argument("--measures", help=f"comma-separated subset of: {','.join(MEASURES)}")
    parser.add_argument("--skip-reference", action="store_true", help="do not run the naive per-pair reference")
    args = parser.parse_args(argv)

    try:
        scales = load(PARAMS)
    except BenchParamsError as e:
        parser.exit(2, f"error: {e}\n")
    unknown = [s for s in args.scale if s not in scales]
    if unknown:
        parser.exit(2, f"error: unknown scale(s) {unknown}; {PARAMS} has {sorted(scales)}\n")
    measures = None
    if args.measures:
        measures = [m.strip() for m in args.measures.split(",") if m.strip()]
        if bad := [m for m in measures if m not in MEASURES]:
            parser.exit(2, f"error: unknown measure(s) {bad}; known: {', '.join(MEASURES)}\n")

    from .report import table
    from .run import bench_scale

    failed = False
    for name in args.scale:
        report = bench_scale(scales[name], args.out, measures=measures, skip_reference=args.skip_reference,
                             log=lambda message: print(message, flush=True))
        print()
        print(table(report))
        print(f"\nwritten: {Path(args.out) / f'{name}.json'}\n", flush=True)
        failed |= any("error" in entry for uc in report["use_cases"].values() for entry in uc["measures"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

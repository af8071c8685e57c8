"""Command line: ``python -m synthaudit_bench --scale quick`` (``make bench-quick``, ``make bench``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .params import MEASURES, BenchParamsError, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m synthaudit_bench",
        description="Time the all-pairs RELICT measures on simulated cohorts at the paper's sizes, "
                    "compare them with naive per-pair code, and check the targets.")
    parser.add_argument("--scale", nargs="+", metavar="NAME",
                        help="scale(s) from the params file, e.g. quick, ncct, tof")
    parser.add_argument("--params", default="bench/params.yaml", help="scales file (default: %(default)s)")
    parser.add_argument("--out", default="results/bench", help="results folder (default: %(default)s)")
    parser.add_argument("--measures", help=f"comma-separated subset of: {','.join(MEASURES)}")
    parser.add_argument("--skip-reference", action="store_true", help="do not run the naive per-pair reference")
    parser.add_argument("--list", action="store_true", help="list the scales and exit")
    args = parser.parse_args(argv)

    try:
        scales = load(args.params)
    except BenchParamsError as e:
        parser.exit(2, f"error: {e}\n")
    if args.list or not args.scale:
        for scale in scales.values():
            cases = ", ".join(f"{u.name} ({u.n_synthetic} x {u.n_training}, {'x'.join(map(str, u.shape))})"
                              for u in scale.use_cases.values())
            print(f"{scale.name}: {cases}")
        return 0 if args.list else 2
    unknown = [s for s in args.scale if s not in scales]
    if unknown:
        parser.exit(2, f"error: unknown scale(s) {unknown}; {args.params} has {sorted(scales)}\n")
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

"""What portable numerics cost at RELICT's NCCT size: the image level's all-pairs engine
(MAE, RMSE, SSIM; ``--scale ncct_cost`` of bench/params.yaml, 50 x 100 volumes of
182 x 218 x 182) run portable and with ``SYNTHAUDIT_NUMERICS=native``, alternating, and the
fastest of the repeats per mode kept (the machine is shared; the minimum is the least noisy
estimate of what the code costs).

Why beside the demo's comparison (numerics_cost.py): the demo's volumes are small, so its
costs are the trainings'; a real audit's image level runs at this size, where the numba
kernels (Haswell code instead of the host's AVX-512) and torch's SSIM pass (ATen at AVX2)
carry the time.

    PYTHONPATH=bench python -m synthaudit_bench.numerics_cost_ncct --out results/bench/numerics_cost_ncct.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from synthaudit.io import write_json

MODES = ("portable", "native")
SCALE, MEASURES, REPEATS = "ncct_cost", "mae,rmse,ssim", 2  # bench/params.yaml's scale; runs per mode, alternating
WORK = Path("results/bench/numerics_cost_ncct")  # the bench's folder (its cohort cache is shared by the runs)


def run_bench(mode: str, scale: str, measures: str, work: Path) -> dict:
    """One run of the bench in its own process (the numerics are set before numpy loads)."""
    env = {**os.environ, "SYNTHAUDIT_NUMERICS": mode, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, "-m", "synthaudit_bench", "--scale", scale, "--measures", measures, "--skip-reference",
           "--out", str(work)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} ({mode}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads((work / f"{scale}.json").read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/numerics_cost_ncct.json"))
    args = ap.parse_args(argv)
    seconds: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    report = None
    for repeat in range(REPEATS):
        for mode in MODES:
            report = run_bench(mode, SCALE, MEASURES, WORK)
            for use_case in report["use_cases"].values():
                for measure, entry in use_case["measures"].items():
                    seconds[mode].setdefault(measure, []).append(entry["engine"]["s_per_pair"])
            print(f"repeat {repeat + 1} {mode}: " + ", ".join(
                f"{m} {v[-1] * 1e3:.2f} ms/pair" for m, v in seconds[mode].items()), file=sys.stderr, flush=True)
    measures = {m: {"portable_ms_per_pair": round(min(seconds["portable"][m]) * 1e3, 3),
                    "native_ms_per_pair": round(min(seconds["native"][m]) * 1e3, 3),
                    "ratio": round(min(seconds["portable"][m]) / min(seconds["native"][m]), 2),
                    "runs_ms_per_pair": {mode: [round(s * 1e3, 3) for s in seconds[mode][m]] for mode in MODES}}
                for m in seconds["portable"]}
    use_case = next(iter(report["use_cases"].values()))["cohort"] if report else {}
    result = {"scale": SCALE, "cohort": use_case, "machine": report["machine"] if report else None,
              "threads": report["params"]["threads"] if report else None,
              "repeats": REPEATS, "measures": measures,
              "definitions": {"ms_per_pair": "the engine's wall time per synthetic-training pair, the fastest of "
                                             "the repeats; ratio: portable / native"}}
    write_json(args.out, result)
    print(json.dumps(measures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

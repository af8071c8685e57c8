"""docs/membership.md's cost table (issue 64, item 5): the membership stage's job-seconds beside the image
level's, from the Snakemake benchmark files of finished runs (the demo's; the real-anatomy audit's).

    python bench/membership/cost.py compute --run demo=FOLDER --run real-anatomy=FOLDER
        # -> results/bench/membership_cost.json
    python bench/membership/cost.py doc [--write]

The image level is the verdict's stage of that name (synthaudit.review.timing: the samples x training, the
held-out and the matched null's MAE, RMSE and SSIM jobs), and also its samples x training jobs alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
from synthaudit.review import timing
from synthaudit.review.tables import combine_benchmarks, read_benchmark

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's tables from the JSON

RESULT = "results/bench/membership_cost.json"
PAGE = "docs/membership.md"
MARKERS = ("<!-- membership_cost: bench/membership/cost.py doc --write -->", "<!-- /membership_cost -->")
IMAGE = timing.STAGE_BENCHMARKS["image level (MAE, RMSE, SSIM)"]
STAGES = {"membership": timing.UNESTIMATED_BENCHMARKS["membership inference"], "image level": IMAGE,
          "samples x training": [p for p in IMAGE if p.startswith("relict_measure/")]}


def seconds(folder: Path, patterns: list[str]) -> tuple[float, int]:
    """Job-seconds and jobs of every dataset's benchmark files matching ``patterns``."""
    files = sorted({f for p in patterns for f in (folder / "benchmarks").glob(p.format(d="*"))})
    return (combine_benchmarks([read_benchmark(f) for f in files])["s"] if files else 0.0), len(files)


def compute(args) -> dict:
    runs = {}
    for item in args.run:
        name, folder = item.split("=", 1)
        runs[name] = {"folder": folder, **{stage: dict(zip(("s", "jobs"), seconds(Path(folder), p)))
                                           for stage, p in STAGES.items()}}
    return {"how": "Snakemake's benchmark files (wall seconds per job) of each run's last jobs", "runs": runs}


def render(res: dict) -> str:
    rows = ["| run | membership | image level (MAE, RMSE, SSIM) | share | samples x training alone | share |",
            "|---|---|---|---|---|---|"]
    for name, r in res["runs"].items():
        m, img, pairs = r["membership"], r["image level"], r["samples x training"]
        rows.append(f"| {name} | {m['s']:.1f} s ({m['jobs']} job) | {img['s']:.1f} s ({img['jobs']} jobs) | "
                    f"{100 * m['s'] / img['s']:.1f} % | {pairs['s']:.1f} s ({pairs['jobs']} jobs) | "
                    f"{100 * m['s'] / pairs['s']:.1f} % |")
    return "\n".join(rows)


def add_args(parser) -> None:
    parser.add_argument("--run", action="append", required=True, metavar="NAME=FOLDER",
                        help="a finished run's folder (its benchmarks/); repeat for each run")


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, render, write, "python bench/membership/cost.py doc --write")


if __name__ == "__main__":
    sys.exit(doc_table.cli(sys.argv[1:], __doc__, RESULT, render, doc, add_args, compute))

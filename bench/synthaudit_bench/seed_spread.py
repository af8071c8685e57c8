"""Each trained estimate's spread over seeds: which change in ``dvc metrics diff`` is the noise
of one training? (issue 42, item 5)

The demo's metrics come from four kinds of trained model. With portable numerics one seed
gives the same bits on every machine, but another seed gives another draw, and a code
change that reorders one random number moves the metric as much as a new seed would. For
each model this reruns the stages that train and read it, on the demo's own upstream
results, once per seed, and summarises every metric they write:

* ``unet``: the U-Net that labels the volumes (``datasets.ncct_demo.segmentation.unet.seed``)
  -> the segmentation level in relict.json and copies.json;
* ``ldm``: the latent diffusion model (``datasets.ncct_ldm.synthetic.ldm.seed``) -> the
  generated set's entries in relict.json, recall.json and privacy.json;
* ``filters``: the privacy filters (``privacy.seed``; filter i of a run trains with seed + i,
  so the workflow's own seed_spread covers ``consistency.n_filters`` seeds) -> privacy.json;
* ``cvae``: the CVAE and the probes (``anonymise.seeds``, one seed per run) -> anonymise.json.

Every numeric leaf gets mean, sample SD, min and max over the seeds, beside the demo's own
value (the default seed). ``synthaudit.review.noise`` reads the result to mark each change of
a ``dvc metrics diff`` as within or beyond the seed noise.

    make demo     # the upstream results the runs start from (a checkout's results/)
    PYTHONPATH=bench python -m synthaudit_bench.seed_spread --out results/bench/seed_spread.json
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

# estimate -> (how a seed enters params.yaml, the rules whose jobs rerun with it, the metrics read,
#              the metrics keys (first level after the provenance) they change)
ESTIMATES = {
    "unet": {"rule": "segment_train_unet", "metrics": ["relict.json", "copies.json"],
             "path": ["datasets", "ncct_demo", "segmentation", "unet", "seed"]},
    "ldm": {"rule": "ldm_train_autoencoder", "metrics": ["relict.json", "recall.json", "privacy.json"],
            "path": ["datasets", "ncct_ldm", "synthetic", "ldm", "seed"]},
    "filters": {"rule": "privacy_train", "metrics": ["privacy.json"], "path": ["privacy", "training", "seed"]},
    "cvae": {"rule": "anonymise", "metrics": ["anonymise.json"], "path": ["anonymise", "seeds"]},
}


def _set(params: dict, path: list[str], value) -> None:
    node = params
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _get(params: dict, path: list[str]):
    node = params
    for key in path:
        node = node[key]
    return node


def flatten(obj, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a metrics file, keyed by their dotted path (lists by index)."""
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k != "synthaudit":  # the provenance entry
                out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}[{i}]"))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and obj is not None and math.isfinite(obj):
        out[prefix] = float(obj)
    return out


def workspace(source: Path, work: Path, params: dict) -> None:
    """A folder holding the demo's results as hard links (mtimes kept, nothing copied) and the
    varied params.yaml. Snakemake removes a job's outputs before it reruns the job, so the
    demo's own files are never written through the links."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "results").mkdir()
    for item in sorted((source / "results").iterdir()):  # not results/bench (the benchmarks, this one's runs)
        if item.name != "bench":
            subprocess.run(["cp", "-al", str(item), str(work / "results" / item.name)], check=True)
    # the trainings resume from their checkpoints, which refuse another seed's (rightly): start afresh
    for checkpoint in list((work / "results").rglob("checkpoint*.pt")) + list((work / "results").rglob("checkpoints")):
        shutil.rmtree(checkpoint) if checkpoint.is_dir() else checkpoint.unlink()
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def run_seed(source: Path, work: Path, params: dict, estimate: str, log, run: bool = True
             ) -> dict[str, dict[str, float]] | None:
    """The metrics of one seed's run; a finished run of the same params is read back (done.json).
    ``run`` False: None where no finished run exists."""
    spec = ESTIMATES[estimate]
    done = work / "done.json"
    if done.is_file() and yaml.safe_load((work / "params.yaml").read_text()) == params:
        log(f"{estimate} {work.name}: reused")
        return json.loads(done.read_text())
    if not run:
        return None
    workspace(source, work, params)
    targets = [f"results/metrics/{m}" for m in spec["metrics"]]
    cmd = [str(BIN / "snakemake"), *targets, "-s", str(ROOT / "Snakefile"), "-d", str(work), "--workflow-profile",
           str(ROOT / "workflow" / "profiles" / "demo"), "--cores", str(os.cpu_count() or 2), "--forcerun",
           spec["rule"]]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{estimate} in {work} failed:\n{proc.stderr[-4000:]}")
    log(f"{estimate} {work.name}: {time.monotonic() - started:.0f} s")
    metrics = {m: flatten(json.loads((work / "results" / "metrics" / m).read_text())) for m in spec["metrics"]}
    done.write_text(json.dumps(metrics))
    return metrics


def summarise(values: list[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else None,
            "min": float(v.min()), "max": float(v.max()), "n": int(len(v))}


def spread(runs: list[dict[str, dict[str, float]]], demo: dict[str, dict[str, float]]) -> dict:
    """Per metrics file and key: the summary over the seeds, for the keys whose value moved
    (keys equal in every run do not depend on this estimate), with the demo's own value."""
    out: dict[str, dict] = {}
    for m in runs[0]:
        keys = sorted(set.intersection(*(set(r[m]) for r in runs)))
        moved = {k: summarise([r[m][k] for r in runs]) | {"demo": demo.get(m, {}).get(k)}
                 for k in keys if len({r[m][k] for r in runs}) > 1}
        out[m] = moved
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", type=Path, default=ROOT, help="a checkout where `make demo` ran (its results/)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds per estimate (default %(default)s)")
    ap.add_argument("--estimates", default=",".join(ESTIMATES), help="comma-separated subset of %(default)s")
    ap.add_argument("--work", type=Path, default=ROOT / "results" / "bench" / "seed_spread")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "seed_spread.json")
    ap.add_argument("--merge", action="store_true",
                    help="keep the estimates of an existing --out that this run does not redo (after a change that "
                         "moves only some models' metrics: their upstream results must be the demo's of today)")
    ap.add_argument("--finished-only", action="store_true",
                    help="summarise only the estimates whose seeds have all finished (done.json); run nothing")
    args = ap.parse_args(argv)
    from synthaudit import numerics

    base = yaml.safe_load((args.source / "params.yaml").read_text())
    demo = {p.name: flatten(json.loads(p.read_text())) for p in (args.source / "results" / "metrics").glob("*.json")}
    result = {"seeds": args.seeds, "numerics": numerics.provenance(), "estimates": {}}
    named = args.estimates.split(",")
    if args.merge and args.out.is_file():
        before = json.loads(args.out.read_text())
        if (before["seeds"], before["numerics"]) != (result["seeds"], result["numerics"]):
            raise SystemExit(f"--merge: {args.out} has {before['seeds']} seeds under {before['numerics']}, this run "
                             f"{result['seeds']} under {result['numerics']}: rerun every estimate instead")
        result["estimates"] = {k: v for k, v in before["estimates"].items() if k not in named}
        if result["estimates"]:  # which ran when: an estimate without "made" is from the earlier run
            result["kept_from"] = {"estimates": sorted(result["estimates"]), "elapsed_s": before["elapsed_s"]}
    started = time.monotonic()

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    for estimate in named:
        spec = ESTIMATES[estimate]
        estimate_started = time.monotonic()
        default = _get(base, spec["path"])
        first = int(default[0] if isinstance(default, list) else default)
        seeds = [first + i for i in range(args.seeds)]
        runs = []
        for seed in seeds:
            params = copy.deepcopy(base)
            # anonymise.seeds is a list (one CVAE per seed): one seed per run, as the other models
            _set(params, spec["path"], [seed] if isinstance(default, list) else seed)
            runs.append(run_seed(args.source, args.work / f"{estimate}-s{seed}", params, estimate, log,
                                 run=not args.finished_only))
        if any(r is None for r in runs):
            log(f"{estimate}: {sum(r is None for r in runs)} of {len(seeds)} seeds not finished, left out")
            continue
        result["estimates"][estimate] = {"param": ".".join(spec["path"]), "default": default, "seeds": seeds,
                                         "rule_rerun": spec["rule"], "metrics": spread(runs, demo),
                                         "made": time.strftime("%Y-%m-%d"),
                                         "elapsed_s": round(time.monotonic() - estimate_started, 1)}
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

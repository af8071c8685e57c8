"""init's time estimate beside the measured job times (issue 47): the drift, stage by stage.

Why: an estimate nobody checks drifts unseen (a 1.5 mm head CT's alignment was estimated at 0.1 h and
took about an hour). ``synthaudit init`` writes its estimate per stage to ``data/estimate.json``; the
workflow's jobs write Snakemake benchmark files (``benchmarks/<rule>/...``: wall seconds per job). The
verdict sets the two side by side, summing the jobs of each stage as the estimate counts them
(job-seconds, each job on its own threads, whatever ran in parallel), and then the whole run's wall time
beside the estimate's (issue 62): what a user waits, unestimated stages and scheduling included.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..resources import ESTIMATE_FILE
from .tables import ReviewError, combine_benchmarks, read_benchmark

IMAGE_MEASURES = ("mae", "rmse", "ssim")

# the benchmark files of each estimated stage ({d}: the dataset); the names are estimate.py's
STAGE_BENCHMARKS = {
    "image level (MAE, RMSE, SSIM)": [f"{rule}/{{d}}/{m}{tail}" for rule in ("relict_measure", "relict_heldout_measure",
                                                                               "relict_matched_measure")
                                      for m in IMAGE_MEASURES for tail in (".tsv", "/*.tsv")],
    "feature level (embedding)": ["embed/{d}/*.tsv"],
    "alignment": ["relict_align/{d}.tsv", "relict_matched_align/{d}.tsv"],
    "FRD radiomics": ["radiomics/{d}/*.tsv"],
    "FRD within label classes": ["radiomics_classes/{d}/*.tsv"],
    "local level": ["relict_local/{d}.tsv"],
    "privacy filters' training": ["privacy_train/{d}/*/*.tsv"],
}
# stages the estimate does not model yet (issue 47): the verdict shows what they took, so the part of the
# run the estimate leaves out is visible, not silently missing
UNESTIMATED_BENCHMARKS = {
    "U-Net (training, prediction)": ["segment_train_unet/{d}.tsv", "segment_predict/{d}/*.tsv"],
    "2.5D FD slices": ["slice_features/{d}/*.tsv"],
    "membership inference": ["membership.tsv"],  # issue 64: one job for every set; shown, not yet estimated
}


def measured_seconds(root: str | Path, dataset: str, stages: dict | None = None) -> dict[str, float]:
    """Job-seconds per stage (``stages``: name -> benchmark patterns, the estimated ones by default) from
    the benchmark files (a stage without any file is left out)."""
    base = Path(root) / "benchmarks"
    out = {}
    for stage, patterns in (STAGE_BENCHMARKS if stages is None else stages).items():
        files = sorted({p for pattern in patterns for p in base.glob(pattern.format(d=dataset))})
        if files:  # tables.read_benchmark: repeats averaged, psutil's "-"/NA tolerated
            out[stage] = combine_benchmarks([read_benchmark(f) for f in files])["s"]
    return out


# a stretch this long with no job running is a pause between two invocations (the first run, then a re-run
# after a params.yaml change), not the run's time; within a run, only the light local rules run unbenchmarked
# (seconds)
PAUSE_S = 60.0


def run_wall_seconds(root: str | Path, pause_s: float = PAUSE_S) -> float | None:
    """The run's wall time from its jobs' benchmark files (``benchmarks/**/*.tsv``): the union of the jobs'
    intervals (a file's modification time less its seconds, to that time), gaps under ``pause_s`` counted
    (the local rules between jobs), longer ones left out. A re-run job replaces its file, so this is the wall
    time of the jobs whose results are the current ones, over however many invocations made them; None
    without a benchmark file."""
    spans = []
    for f in (Path(root) / "benchmarks").rglob("*.tsv"):
        try:
            seconds = read_benchmark(f)["s"]
        except ReviewError:  # not a benchmark file: not a job's time
            continue
        end = f.stat().st_mtime
        spans.append((end - seconds, end))
    if not spans:
        return None
    spans.sort()
    total, (lo, hi) = 0.0, spans[0]
    for a, b in spans[1:]:
        if a > hi + pause_s:  # a pause: close the stretch
            total, lo = total + hi - lo, a
        hi = max(hi, b)
    return total + hi - lo


def estimated_wall_seconds(est: dict) -> float:
    """The estimate's whole run: its stages' job-seconds (jobs on 2 threads) run ``cores // 2`` at a time on
    the machine init ran on (``cores`` in data/estimate.json; estimates written before it: 2)."""
    return sum(float(v) for v in est["stages_s"].values()) / max(1, int(est.get("cores") or 2) // 2)


def _estimate(root: str | Path, dataset: str) -> dict | None:
    """init's data/estimate.json where it is this dataset's (None: the demo, or params written by hand)."""
    path = Path(root) / ESTIMATE_FILE
    if not path.is_file():
        return None
    est = json.loads(path.read_text())
    return est if est.get("dataset") == dataset else None


def estimate_rows(root: str | Path, dataset: str, est: dict | None = None,
                  measured: dict | None = None) -> list[dict] | None:
    """Per estimated stage: estimated and measured seconds and their ratio; None without an estimate
    for this dataset. ``est``, ``measured``: the estimate and the measured seconds, where the caller
    has read them."""
    est = est or _estimate(root, dataset)
    if est is None:
        return None
    measured = measured_seconds(root, dataset) if measured is None else measured
    rows = []
    for stage, seconds in est["stages_s"].items():
        got = measured.get(stage)
        rows.append({"stage": stage, "estimated_s": float(seconds), "measured_s": got,
                     "ratio": got / seconds if got is not None and seconds > 0 else None})
    return rows


def estimate_lines(root: str | Path, dataset: str) -> list[str]:
    """The verdict's lines: one item, then one sub-item per stage (minutes, and measured / estimated)."""
    est = _estimate(root, dataset)
    if est is None:
        return []
    head = (f"  time, init's estimate against the run's jobs (job-minutes; {est.get('how')}"
            + (f", {est['machine']}" if est.get("machine") else "") + "):")
    lines = [head]
    measured = measured_seconds(root, dataset)
    ranges = est.get("ranges_s") or {}
    for r in estimate_rows(root, dataset, est, measured):
        span = ranges.get(r["stage"])  # a stage whose length the run decides (early stopping)
        estimated = f"estimated {r['estimated_s'] / 60:.1f}" + (
            f" (between {span[0] / 60:.1f} and {span[1] / 60:.1f})" if span else "")
        if r["measured_s"] is None:
            lines.append(f"    {r['stage']}: {estimated}, not run")
        else:
            lines.append(f"    {r['stage']}: {estimated}, measured {r['measured_s'] / 60:.1f}"
                         + (f" ({r['ratio']:.2f}x)" if r["ratio"] is not None else ""))
    # what ran without an estimate: the stages the estimate does not model, and a modelled one init left
    # out (an estimate written before it was modelled, or the stage switched on after init)
    rest = {stage: s for stage, s in measured.items() if stage not in est["stages_s"]}
    rest.update(measured_seconds(root, dataset, UNESTIMATED_BENCHMARKS))
    if rest:
        lines.append("    not in the estimate: " + ", ".join(f"{stage} {s / 60:.1f}" for stage, s in rest.items()))
    wall, planned = run_wall_seconds(root), estimated_wall_seconds(est)
    if wall is not None and planned > 0:
        lines.append(f"    the whole run: wall {wall / 60:.1f} min, estimated {planned / 60:.1f} ({wall / planned:.2f}x; "
                     f"the wall time is the jobs' own, from the first to the last, up to this verdict"
                     + (", with the stages not in the estimate" if rest else "") + ")")
    return lines

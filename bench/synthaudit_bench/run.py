"""Running the benchmark: each measure in a fresh process, then the reference and the report.

Why a process per measure: peak memory (``ru_maxrss``) only ever grows, so one
process running all measures would report the largest of them for every one; a
fresh child also starts with cold allocator and thread pools, as a workflow job
does. The child runs exactly the engine functions the workflow calls, reads its
inputs from the memory-mapped cohort and times that reading apart from the compute.

Child protocol: ``python -m synthaudit_bench.run --child TASK.json RESULT.json``,
where a task is ``{"task": "engine" | "reference" | "profile", "cohort": folder,
"measure": name, ...}``.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import math
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import report as figures
from synthaudit.numerics import cpu_model

from .cohort import Cohort, CohortSpec, Reader, cohort_path, ensure, progress_log
from .floor import ssim_floor
from .params import LEVELS, Scale, UseCase
from .reference import METHODS, SINGLE_THREAD_ENV, choose_pairs, compare, run_reference

THREAD_VARS = tuple(SINGLE_THREAD_ENV)
PROFILE_TOP = 15
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # bench/, the folder holding synthaudit_bench/ (the benchmarks are not in the wheel)


# What the report's figures mean; copied into every JSON so that it reads on its own.
DEFINITIONS = {
    "wall_s": "engine process: reading inputs + compute (load_s + compute_s), imports excluded",
    "load_s": "reading the cohort's arrays from disk into memory (synthetic up front, training streamed)",
    "compute_s": "wall_s - load_s: the engine function's own time, one-time costs inside it (e.g. JIT) included",
    "cpu_s": "user + sys CPU time of the engine process over wall_s (all threads)",
    "s_per_pair": "compute_s / pairs",
    "s_per_pair_core": "compute_s * threads / pairs (CPU runs only)",
    "peak_rss_mb": "ru_maxrss of the fresh engine process (imports, inputs and compute), MiB",
    "reference.s_per_pair": "naive per-pair code, one thread, mean over the reference pairs",
    "speedup.per_pair": "reference.s_per_pair / engine s_per_pair",
    "speedup.per_core": "reference.s_per_pair / engine s_per_pair_core",
    "max_rel_diff": "max over reference pairs of |engine - reference| / max(|reference|, tiny)",
    "combined": "sum over the listed measures (each a separate job in the workflow)",
    "extrapolated": "ran on a fraction of the training volumes; times scaled by n_training / measured",
    "profile": "cProfile of the engine on profile_training training volumes after an unprofiled warm-up",
}


class BenchError(RuntimeError):
    """A benchmark step failed; the message says which."""


# --------------------------------------------------------------------------- child side


def execute(task: dict) -> dict:
    """Run one task (in the current process) and return its JSON-able result."""
    cohort = Cohort(task["cohort"])
    measure = task["measure"]
    if task["task"] == "engine":
        values, result = run_engine(cohort, measure, task["n_training"], task["threads"], task["device"])
        path = Path(task["values_file"])
        from synthaudit.io import atomic_path

        with atomic_path(path) as tmp:
            np.save(tmp, values)
        return {**result, "values_file": str(path)}
    if task["task"] == "reference":
        return run_reference(cohort, measure, [tuple(p) for p in task["pairs"]])
    if task["task"] == "profile":
        return profile_engine(cohort, measure, task["n_training"], task["threads"], task["device"])
    raise ValueError(f"unknown task {task['task']!r}")


def run_engine(cohort: Cohort, measure: str, n_training: int, threads: int, device: str,
               log: Callable[[str], None] | None = None) -> tuple[np.ndarray, dict]:
    """One measure for all pairs with the workflow's engine function; values and timings.

    Inputs come from the memory-mapped cohort: synthetic data are read up front,
    training volumes one at a time as the engine asks for them; all reading is
    timed (``load_s``) and subtracted from the wall time to give ``compute_s``.
    """
    log = log or _stderr
    level = LEVELS[measure]
    n_synthetic = cohort.spec.n_synthetic
    engine = _prepare(level, device)
    clock = _ReadClock()
    baseline_rss = _peak_rss_mb()
    progress = progress_log(log, f"  {measure}: training volumes", n_training, every_s=30.0)
    cpu_start, start = _cpu_seconds(), time.perf_counter()
    if level == "image":
        synthetic = clock.read(cohort.reader("synthetic_images"), 0, n_synthetic)
        values = engine(
            synthetic, _Streamed(cohort.reader("training_images"), n_training, clock), [measure],
            data_range=cohort.data_range, threads=threads, device=device, n_training=n_training,
            progress=progress)[measure]
        extra = _device_info(device)
    elif level == "feature":
        synthetic = clock.read(cohort.reader("synthetic_embeddings"), 0, n_synthetic)
        training = clock.read(cohort.reader("training_embeddings"), 0, n_training)
        values = engine(synthetic, training, [measure])[measure]
        extra = {"device": "cpu", "device_name": cpu_model()}
    else:
        synthetic_maps = clock.read(cohort.reader("synthetic_labels"), 0, n_synthetic)
        values = engine(
            list(synthetic_maps), _Streamed(cohort.reader("training_labels"), n_training, clock),
            labels=cohort.labels, spacing_mm=cohort.spec.spacing_mm, measures=[measure],
            n_training=n_training, progress=progress, threads=threads)[measure]
        extra = {"device": "cpu", "device_name": cpu_model()}
    wall = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_start
    if values.shape != (n_synthetic, n_training):
        raise BenchError(f"{measure}: engine returned shape {values.shape}, expected {(n_synthetic, n_training)}")
    return values, {
        "measure": measure, "level": level, "n_synthetic": n_synthetic, "n_training": n_training,
        "pairs": n_synthetic * n_training, "load_s": clock.seconds, "compute_s": wall - clock.seconds,
        "wall_s": wall, "cpu_s": cpu, "threads": threads, **extra,
        "peak_rss_mb": _peak_rss_mb(), "rss_before_inputs_mb": baseline_rss,
    }


def profile_engine(cohort: Cohort, measure: str, n_training: int, threads: int, device: str) -> dict:
    """The engine on ``n_training`` training volumes under cProfile: where the time goes.

    A warm-up call on one training volume runs first, unprofiled, so that one-time costs
    (imports, CUDA start-up, JIT compilation), which vanish at the paper's scale, do not
    crowd the profile; its time is reported as ``warmup_s``.
    """
    warmup = time.perf_counter()
    run_engine(cohort, measure, 1, threads, device, log=lambda _: None)
    warmup = time.perf_counter() - warmup
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    _, result = run_engine(cohort, measure, n_training, threads, device, log=lambda _: None)
    profiler.disable()
    stats = pstats.Stats(profiler)
    return {"measure": measure, "n_training": n_training, "n_synthetic": result["n_synthetic"],
            "wall_s": time.perf_counter() - start, "compute_s": result["compute_s"], "load_s": result["load_s"],
            "warmup_s": warmup,
            **figures.profile_rows(stats, PROFILE_TOP)}


def _prepare(level: str, device: str) -> Callable:
    """Import the level's engine function (and start CUDA when it will be used) before any clock starts.

    Why: importing torch alone takes seconds, and a CUDA context more; both are the job's
    start-up, not the measure's cost.
    """
    if level == "image":
        from synthaudit.devices import resolve_device
        from synthaudit.relict.image_measures import all_pairs_image_measures

        dev = resolve_device(device)
        if dev.type == "cuda":
            import torch

            torch.zeros(1, device=dev)
            torch.cuda.synchronize(dev)
        return all_pairs_image_measures
    if level == "feature":
        from synthaudit.features.compare import all_pairs_feature_measures

        return all_pairs_feature_measures
    from synthaudit.segment.measures import all_pairs_segmentation_measures

    return all_pairs_segmentation_measures


class _ReadClock:
    """Accumulates the time spent reading cohort data from disk into memory."""

    def __init__(self):
        self.seconds = 0.0

    def read(self, reader: Reader, start: int, stop: int | None = None) -> np.ndarray:
        begin = time.perf_counter()
        data = reader.read(start, stop)
        self.seconds += time.perf_counter() - begin
        return data


class _Streamed:
    """Items ``0..n-1`` of a cohort array, each read from disk when the engine asks for it."""

    def __init__(self, reader: Reader, n: int, clock: _ReadClock):
        self.reader, self.n, self.clock = reader, n, clock

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield self.clock.read(self.reader, i)


def _device_info(device: str) -> dict:
    from synthaudit.devices import resolve_device

    dev = resolve_device(device)
    if dev.type == "cuda":
        import torch

        return {"device": "cuda", "device_name": torch.cuda.get_device_name(dev),
                "gpu_peak_mb": torch.cuda.max_memory_allocated(dev) / 2**20}
    return {"device": "cpu", "device_name": cpu_model()}


def _peak_rss_mb() -> float:
    """This process's peak resident memory (MB).

    Linux keeps ``ru_maxrss`` across fork and exec (it lives in the signal struct), so
    a child started by a parent that once held the whole cohort would report the
    parent's peak; ``VmHWM`` belongs to the address space that exec creates anew.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- parent side


def spawn(task: dict, threads: int, isolated: bool = True) -> dict:
    """Run ``task`` in a fresh Python process limited to ``threads`` BLAS/OpenMP threads.

    With ``isolated=False`` it runs in this process (tests: no interpreter start-up,
    but peak RSS and thread limits are then this process's).
    """
    if not isolated:
        return _in_process(task, threads)
    env = {**os.environ, **{v: str(threads) for v in THREAD_VARS}}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="synthaudit-bench-") as tmp:
        task_file, result_file = Path(tmp) / "task.json", Path(tmp) / "result.json"
        task_file.write_text(json.dumps(task))
        proc = subprocess.run([sys.executable, "-m", "synthaudit_bench.run", "--child", str(task_file),
                               str(result_file)], env=env)
        if proc.returncode != 0 or not result_file.is_file():
            raise BenchError(f"{task['task']} run of {task['measure']} failed (exit status {proc.returncode}); "
                             "its error is printed above")
        return json.loads(result_file.read_text())


def _in_process(task: dict, threads: int) -> dict:
    """``execute`` here, with BLAS/OpenMP pools limited when threadpoolctl is installed."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return execute(task)
    with threadpool_limits(limits=threads):
        return execute(task)


def bench_scale(scale: Scale, out: str | Path, measures: list[str] | None = None, skip_reference: bool = False,
                isolated: bool = True, log: Callable[[str], None] = print) -> dict:
    """Benchmark every use case of ``scale``; write ``<out>/<scale>.json`` and return the report.

    Args:
        scale: The validated scale.
        out: Results folder (cohorts go to ``<out>/cohort``, value matrices to
            ``<out>/<scale>/<use case>/<measure>.npy``).
        measures: Run only these measures (default: each use case's list).
        skip_reference: Do not run the per-pair reference.
        isolated: One fresh process per measure (off only in tests).
    """
    from synthaudit.io import write_json

    out = Path(out)
    started = time.perf_counter()
    load_start = list(os.getloadavg())
    report = {
        "scale": scale.name, "description": scale.description,
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "params": {"seed": scale.seed, "threads": scale.threads, "device": scale.device,
                   "reference_pairs": scale.reference_pairs,
                   "ssim_training_fraction": scale.ssim_training_fraction,
                   "profile_training": scale.profile_training, "measures_requested": measures,
                   "reference": not skip_reference, "isolated": isolated},
        "machine": figures.machine(),
        "load_average": {"start": load_start},
        "definitions": DEFINITIONS,
        "use_cases": {},
    }
    for use_case in scale.use_cases.values():
        if measures is not None and not set(measures) & set(use_case.measures):
            log(f"[{scale.name}/{use_case.name}] none of the requested measures: skipped")
            continue
        report["use_cases"][use_case.name] = bench_use_case(scale, use_case, out, measures, skip_reference,
                                                            isolated, log)
    report["load_average"]["end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    write_json(out / f"{scale.name}.json", report)
    return report


def bench_use_case(scale: Scale, use_case: UseCase, out: Path, measures: list[str] | None, skip_reference: bool,
                   isolated: bool, log: Callable[[str], None]) -> dict:
    """Cohort, engine runs, reference comparison, combined figure and targets of one use case."""
    tag = f"[{scale.name}/{use_case.name}]"
    spec = CohortSpec.of(use_case, scale.seed)
    cohort = ensure(spec, cohort_path(out / "cohort", scale.name, use_case.name, spec), log=log)
    selected = [m for m in use_case.measures if measures is None or m in measures]
    results: dict[str, dict] = {}
    for measure in selected:
        n_used = _training_used(scale, use_case, measure)
        base = {"cohort": str(cohort.path), "measure": measure, "threads": scale.threads, "device": scale.device}
        log(f"{tag} {measure}: engine on {use_case.n_synthetic} x {n_used} pairs ...")
        try:
            raw = spawn({**base, "task": "engine", "n_training": n_used,
                         "values_file": str(out / scale.name / use_case.name / f"{measure}.npy")},
                        scale.threads, isolated)
        except BenchError as e:
            log(f"{tag} {measure}: {e}")
            results[measure] = {"error": str(e)}
            continue
        entry = {"engine": figures.engine_figures(raw, use_case.n_training)}
        if measure == "ssim" and raw["device"] == "cpu":  # how far from this machine's floor
            entry["floor"] = ssim_floor(spec.shape, scale.threads, entry["engine"]["s_per_pair"])
            log(f"{tag} ssim: {entry['floor']['times_floor']}x the floor of {entry['floor']['floor_s_per_pair'] * 1e3:.1f} "
                f"ms per pair ({entry['floor']['bound']}-bound)")
        log(f"{tag} {measure}: {raw['compute_s']:.2f} s compute + {raw['load_s']:.2f} s loading, "
            f"peak RSS {raw['peak_rss_mb']:.0f} MB")
        n_pairs = scale.pairs_for(measure)
        if not skip_reference and n_pairs and measure not in METHODS:  # a registered measure without one
            entry["reference"] = {"error": f"no independent reference for {measure} in bench/reference.py"}
        elif not skip_reference and n_pairs:
            pairs = choose_pairs(use_case.n_synthetic, n_used, cohort.replica_of, n_pairs, scale.seed)
            log(f"{tag} {measure}: reference on {len(pairs)} pairs, single-threaded ...")
            try:
                ref = spawn({**base, "task": "reference", "pairs": pairs}, 1, isolated)
            except BenchError as e:
                log(f"{tag} {measure}: {e}")
                entry["reference"] = {"error": str(e)}
            else:
                engine_values = np.load(raw["values_file"])[tuple(np.array(pairs).T)]
                ref["engine_values"] = engine_values.tolist()
                ref["threads"] = 1
                ref["note"] = "single-threaded: OMP/MKL/OpenBLAS threads = 1; timing excludes reading the pair"
                entry["reference"] = ref
                entry["comparison"] = {**compare(engine_values, ref["values"]),
                                       "speedup": figures.speed(ref["s_per_pair"], entry["engine"])}
        results[measure] = entry
    combined = figures.combined(use_case.combined, results)
    verdicts = figures.targets(use_case, results, combined)
    _explain_misses(scale, use_case, cohort, verdicts, results, isolated, log, tag)
    return {"cohort": {"path": str(cohort.path), "key": cohort.meta["key"], "kind": spec.kind,
                       "n_synthetic": spec.n_synthetic, "n_training": spec.n_training,
                       "n_replicas": spec.n_replicas, "shape": list(spec.shape), "spacing_mm": list(spec.spacing_mm),
                       "n_classes": spec.n_classes, "embedding_dim": spec.embedding_dim,
                       "data_range": cohort.data_range, "empty_label_maps": cohort.meta["empty_label_maps"],
                       "generation_s": cohort.meta["generation_s"]},
            "measures": results, "combined": combined, "targets": verdicts}


def _training_used(scale: Scale, use_case: UseCase, measure: str) -> int:
    if measure != "ssim" or scale.ssim_training_fraction >= 1:
        return use_case.n_training
    return max(1, math.ceil(scale.ssim_training_fraction * use_case.n_training))


def _explain_misses(scale: Scale, use_case: UseCase, cohort: Cohort, verdicts: list[dict], results: dict,
                    isolated: bool, log: Callable[[str], None], tag: str) -> None:
    """Attach a cProfile run on a small slice to every missed time target."""
    profiles: dict[str, dict] = {}
    for verdict in verdicts:
        if verdict["met"] is not False or verdict["unit"] != "s":
            continue
        verdict["profile"] = {}
        for measure in verdict["measures"]:
            if "engine" not in results.get(measure, {}):
                continue
            if measure not in profiles:
                n = min(scale.profile_training, use_case.n_training)
                log(f"{tag} {verdict['name']} missed: profiling {measure} on {n} training volume(s) ...")
                try:
                    profiles[measure] = spawn({"task": "profile", "cohort": str(cohort.path), "measure": measure,
                                               "n_training": n, "threads": scale.threads, "device": scale.device},
                                              scale.threads, isolated)
                except BenchError as e:
                    profiles[measure] = {"error": str(e)}
            verdict["profile"][measure] = profiles[measure]


# --------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synthaudit_bench.run",
                                     description="Internal: run one benchmark task in this process.")
    parser.add_argument("--child", nargs=2, metavar=("TASK_JSON", "RESULT_JSON"), required=True)
    args = parser.parse_args(argv)
    task = json.loads(Path(args.child[0]).read_text())
    result = execute(task)
    Path(args.child[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

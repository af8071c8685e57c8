"""Benchmark figures: the machine, per-measure rates, the combined figure, targets, the table.

Why separate from running: the arithmetic that turns raw timings into the reported
figures (per pair, per core, extrapolation, target verdicts) is small, pure and
tested on its own; running decides only what to measure.
"""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path

from synthaudit.numerics import cpu_model

# Paths in profiles are shortened after these markers.
_PATH_MARKERS = ("site-packages/", "workflow/scripts/", "lib/python")


def machine() -> dict:
    """Hardware and library versions the figures depend on."""
    import numpy
    import scipy
    import skimage
    import torch

    ram_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gb = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    cuda = torch.cuda.is_available()
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_gb": ram_gb,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "scikit-image": skimage.__version__,
        "torch": torch.__version__,
    }


def engine_figures(raw: dict, n_training_total: int) -> dict:
    """Per-pair figures of one engine run; scaled to all training volumes if it ran on fewer.

    ``s_per_pair`` is compute wall time (loading excluded) per pair; ``s_per_pair_core``
    multiplies it by the threads (CPU only; None on a GPU); ``cpu_s_per_pair`` is the
    process's CPU time (user + sys, loading included) per pair.
    """
    out = dict(raw)
    pairs = raw["pairs"]
    on_cpu = raw["device"] == "cpu"
    out["s_per_pair"] = raw["compute_s"] / pairs if pairs else None
    out["s_per_pair_core"] = raw["compute_s"] * raw["threads"] / pairs if pairs and on_cpu else None
    out["cpu_s_per_pair"] = raw["cpu_s"] / pairs if pairs else None
    used = raw["n_training"]
    out["extrapolated"] = used < n_training_total
    if out["extrapolated"]:
        factor = n_training_total / used
        out["measured"] = {k: raw[k] for k in ("n_training", "pairs", "wall_s", "compute_s", "load_s", "cpu_s")}
        for k in ("wall_s", "compute_s", "load_s", "cpu_s"):
            out[k] = raw[k] * factor
        out["n_training"] = n_training_total
        out["pairs"] = raw["n_synthetic"] * n_training_total
    return out


def speed(reference_s_per_pair: float | None, engine: dict) -> dict:
    """How many times faster the engine is than the single-threaded reference."""
    def ratio(a, b):
        return a / b if a and b else None

    return {"per_pair": ratio(reference_s_per_pair, engine.get("s_per_pair")),
            "per_core": ratio(reference_s_per_pair, engine.get("s_per_pair_core"))}


def combined(measures: tuple[str, ...], results: dict) -> dict:
    """Sum of the listed measures' times (each a separate job in the workflow), largest RSS."""
    done = [m for m in measures if "engine" in results.get(m, {})]
    engines = [results[m]["engine"] for m in done]
    return {
        "measures": list(measures),
        "missing": [m for m in measures if m not in done],
        "complete": len(done) == len(measures),
        **{k: sum(e[k] for e in engines) for k in ("wall_s", "compute_s", "load_s", "cpu_s")},
        "peak_rss_mb": max((e["peak_rss_mb"] for e in engines), default=None),
        "extrapolated": any(e["extrapolated"] for e in engines),
    }


def targets(use_case, results: dict, combined_figure: dict) -> list[dict]:
    """Each target of the use case: limit, measured value, met (None when not measured)."""
    verdicts = []
    for name, limit in use_case.targets.items():
        if name == "speedup_per_core":
            continue
        if name == "combined_wall_s":
            measures = list(use_case.combined)
            measured = combined_figure["wall_s"] if combined_figure["complete"] else None
            extrapolated = combined_figure["extrapolated"]
        elif name == "peak_rss_mb":
            measures = [m for m in use_case.measures if "engine" in results.get(m, {})]
            measured = max((results[m]["engine"]["peak_rss_mb"] for m in measures), default=None)
            extrapolated = False
        else:
            measures = [name.removesuffix("_wall_s")]
            engine = results.get(measures[0], {}).get("engine")
            measured = engine["wall_s"] if engine else None
            extrapolated = bool(engine and engine["extrapolated"])
        verdict = {"name": name, "target": limit, "unit": "MB" if name == "peak_rss_mb" else "s",
                   "comparison": "<=", "measured": measured,
                   "met": None if measured is None else measured <= limit,
                   "measures": measures, "extrapolated": extrapolated}
        if name == "peak_rss_mb":
            verdict["by_measure"] = {m: results[m]["engine"]["peak_rss_mb"] for m in measures}
        verdicts.append(verdict)
    # speed target (params `speedup_per_core`): each measure that many times faster per core than
    # the naive reference; meaningful at the paper's sizes, where per-call fixed costs are amortised
    minimum = use_case.targets.get("speedup_per_core")
    for m in use_case.measures if minimum is not None else ():
        speedup = results.get(m, {}).get("comparison", {}).get("speedup", {}).get("per_core")
        engine = results.get(m, {}).get("engine") or {}
        verdicts.append({"name": f"speedup_per_core_{m}", "target": minimum, "unit": "x",
                         "comparison": ">=", "measured": speedup,
                         "met": None if speedup is None else speedup >= minimum,
                         "measures": [m], "extrapolated": bool(engine.get("extrapolated"))})
    return verdicts


def profile_rows(stats, top: int) -> dict:
    """The ``top`` functions by cumulative and by own (total) time from a ``pstats.Stats``."""
    rows = []
    for (file, line, function), (_, calls, tottime, cumtime, _) in stats.stats.items():
        rows.append({"function": function, "location": _short(file, line), "calls": calls,
                     "tottime_s": round(tottime, 6), "cumtime_s": round(cumtime, 6)})
    return {"by_cumulative": sorted(rows, key=lambda r: -r["cumtime_s"])[:top],
            "by_total": sorted(rows, key=lambda r: -r["tottime_s"])[:top]}


def _short(file: str, line: int) -> str:
    if file == "~":
        return "(built-in)"
    for marker in _PATH_MARKERS:
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    return f"{file}:{line}"


# --------------------------------------------------------------------------- table


def table(report: dict) -> str:
    """A readable summary of a scale's report."""
    lines = [f"benchmark {report['scale']}: {report['machine']['cpu_model']}, "
             f"{report['machine']['usable_cores']} cores, {report['machine']['ram_gb']} GB RAM, "
             f"GPU {report['machine']['gpu'] or 'none'}; load average at start "
             f"{' '.join(f'{x:.1f}' for x in report['load_average']['start'])}"]
    for name, uc in report["use_cases"].items():
        c = uc["cohort"]
        lines += ["", f"{report['scale']}/{name}: {c['n_synthetic']} synthetic x {c['n_training']} training, "
                      f"{'x'.join(map(str, c['shape']))} voxels, {report['params']['threads']} threads"]
        header = (f"{'measure':<16}{'pairs':>8}{'load s':>9}{'compute s':>11}{'wall s':>9}{'ms/pair':>10}"
                  f"{'RSS MB':>9}{'ref ms/pair':>13}{'x pair':>8}{'x core':>8}{'max rel diff':>14}  device")
        lines += [header, "-" * len(header)]
        for measure, entry in uc["measures"].items():
            if "error" in entry:
                lines.append(f"{measure:<16}  FAILED: {entry['error']}")
                continue
            e, ref, cmp_ = entry["engine"], entry.get("reference", {}), entry.get("comparison", {})
            star = "*" if e["extrapolated"] else " "
            lines.append(
                f"{measure:<16}{e['pairs']:>8}{_f(e['load_s']):>9}{_f(e['compute_s']):>11}{_f(e['wall_s']):>8}{star}"
                f"{_f(_ms(e['s_per_pair'])):>10}{_f(e['peak_rss_mb']):>9}{_f(_ms(ref.get('s_per_pair'))):>13}"
                f"{_f(cmp_.get('speedup', {}).get('per_pair')):>8}{_f(cmp_.get('speedup', {}).get('per_core')):>8}"
                f"{_f(cmp_.get('max_rel_diff'), '.1e'):>14}  {e['device']}")
        comb = uc["combined"]
        if comb["measures"]:
            note = f" (missing {', '.join(comb['missing'])})" if comb["missing"] else ""
            lines.append(f"combined {'+'.join(comb['measures'])}: wall {_f(comb['wall_s'])} s "
                         f"(compute {_f(comb['compute_s'])} s, loading {_f(comb['load_s'])} s){note}")
        for t in uc["targets"]:
            verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
            lines.append(f"target {t['name']} {t['comparison']} {t['target']:g} {t['unit']}: measured "
                         f"{_f(t['measured'])} {t['unit']}{' (extrapolated)' if t['extrapolated'] else ''}: {verdict}")
    if any(e.get("engine", {}).get("extrapolated") for uc in report["use_cases"].values()
           for e in uc["measures"].values()):
        lines.append("* extrapolated from a fraction of the training volumes (ssim_training_fraction)")
    lines.append("reference: naive per-pair code, single-threaded (OMP/MKL/OpenBLAS threads = 1); "
                 "x pair / x core = reference time per pair over engine compute time per pair / per core")
    return "\n".join(lines)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _f(value, fmt: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)

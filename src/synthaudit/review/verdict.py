"""The answer an audit exists for, read back from a finished run's own files.

Why: a user asks "which of my synthetic volumes are copies, and of whom?" before anything
else; the answer is spread over the rankings, the calibrated calls (copies.json,
copies.tsv) and the rating-tuned thresholds (relict.json). This module gathers it per
synthetic set, for `synthaudit where` and the report's verdict figure, and never computes
a new number: every count is read or counted from those files.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..io import read_metrics, read_tsv
from ..relict.ranking import read_ranking
from ..fidelity.audit import summary_lines as fidelity_lines
from ..membership.audit import summary_lines as membership_lines
from ..relict.texture import texture_line
from ..resources import INPUT_WARNINGS as WARNINGS_FILE


def dataset_verdict(root: Path, dataset: str, order: list[str] | None = None,
                    aligned: bool | None = None) -> dict | None:
    """Calls per measure (calibrated and rating-tuned), copied patients and the most likely
    replicas of one dataset; None when the run has no ranking for it yet. ``order``: the
    measures in the order params.yaml lists them (the first one's ranking is quoted)."""
    base = Path(root) / "results/relict" / dataset
    found = {p.stem.removeprefix("ranking_"): p for p in base.glob("ranking_*.tsv")}
    names = [m for m in (order or []) if m in found] + sorted(set(found) - set(order or []))
    rankings = {m: read_ranking(found[m]) for m in names}
    if not rankings:
        return None
    metrics_path = Path(root) / "results/metrics/relict.json"
    metrics = read_metrics(metrics_path).get(dataset, {}) if metrics_path.is_file() else {}
    copies_path = base / "copies.json"
    copies = json.loads(copies_path.read_text()) if copies_path.is_file() else None
    out = {"dataset": dataset, "n_synthetic": len(next(iter(rankings.values()))), "measures": {}}
    if aligned is not None:  # whether relict.alignment searched this set for flipped/shifted/rotated copies
        out["aligned"] = bool(aligned)
    for m, rows in rankings.items():
        e = {"most_likely": [(r["synthetic_id"], r["closest_training_id"], r["score"]) for r in rows[:3]]}
        if copies and m in copies["measures"]:
            e["calibrated_calls"] = copies["measures"][m]["n_copies"]
        threshold = (metrics.get(m) or {}).get("threshold")
        if threshold is not None:  # RELICT: replica when the score is at or below the tuned threshold
            e["rating_tuned_calls"] = sum(r["score"] <= threshold for r in rows)
            e["threshold"] = threshold
        found = base / "search" / f"{m}.json"
        if found.is_file():  # relict.search: shortlisted pairs, and the recall measured in this run
            e["search"] = {k: v for k, v in json.loads(found.read_text()).items() if k != "rows"}
        out["measures"][m] = e
    warnings = Path(root) / WARNINGS_FILE
    if warnings.is_file():  # what init accepted with a warning qualifies the answer (an empty sample's "replica")
        out["input_warnings"] = [(r["id"], r["role"], r["warning"]) for r in read_tsv(warnings)
                                 if r.get("dataset") == dataset]
    texture = base / "texture.json"
    if texture.is_file():  # relict.texture: the samples' smoothness and noise against the held-out scans'
        out["texture"] = json.loads(texture.read_text())
    fidelity = Path(root) / "results" / "fidelity" / dataset / "fidelity.json"
    if fidelity.is_file():  # synthaudit.fidelity: how good the samples are, beside whether they copy
        out["fidelity"] = json.loads(fidelity.read_text())
        per_volume = fidelity.with_name("per_volume.tsv")
        if per_volume.is_file():  # authenticity per sample, set beside the calibrated calls
            out["authentic_of"] = {r["id"]: r["authentic"] == "True" for r in read_tsv(per_volume)}
    membership = Path(root) / "results" / "membership" / dataset / "membership.json"
    if membership.is_file():  # synthaudit.membership: whether the samples tell who trained the generator
        out["membership"] = json.loads(membership.read_text())
    local = base / "local" / "local.json"
    if local.is_file():  # relict.local: regions copied into otherwise new volumes
        out["local"] = local_verdict(base / "local")
    from .timing import estimate_lines

    timing = estimate_lines(root, dataset)
    if timing:  # init's time estimate (data/estimate.json) beside the jobs' benchmark files
        out["time"] = timing
    if copies:
        out["rate"], out["n_heldout"] = copies["rate"], copies["n_heldout"]
        out["combined"] = copies["combined"]
        if copies.get("combined_heldout_called") is not None:  # the same rule on the held-out scans, each left out
            out["combined_heldout_called"] = copies["combined_heldout_called"]
        out["matched_null"] = copies.get("matched_null") or []
        table = base / "copies.tsv"
        out["copied_patients"] = [(r["patient_id"], r["copied_by"].split()) for r in read_tsv(table)
                                  if r.get("combined_copies", "0") not in ("", "0")] if table.is_file() else []
    return out


def local_verdict(folder: Path) -> dict:
    """The local level's answer (local.json, local_calls.tsv): its calls with their block and
    training patient, the held-out check and the positive controls per region size."""
    summary = json.loads((folder / "local.json").read_text())
    calls = [r for r in read_tsv(folder / "local_calls.tsv") if r.get("called") == "1"] \
        if (folder / "local_calls.tsv").is_file() else []
    settings = summary.get("settings", {})
    return {"n_called": summary["n_called"], "n_synthetic": summary["n_synthetic"],
            "n_heldout": summary["n_heldout"], "rate": settings.get("rate"), "block_mm": settings.get("block_mm"),
            "heldout_called": summary["heldout_called_leave_patient_out"],
            "n_anatomy_blocks": summary.get("n_anatomy_blocks"),
            "calls": [(r["synthetic_id"], r["closest_training_id"], r["closest_patient_id"], r["block_centre_mm"],
                       r["fpr"]) for r in calls],
            "controls": (summary.get("controls") or {}).get("by_size_mm"),
            "control_placement": (summary.get("controls") or {}).get("centred_on"),
            "control_reasons": (summary.get("controls") or {}).get("reasons") or {}}


def local_lines(loc: dict) -> list[str]:
    """A verdict's "local copies" lines: what was called, where, and what the controls found."""
    head = (f"  local copies (relict.local, blocks of {loc['block_mm']:g} mm, {loc.get('n_anatomy_blocks')} with "
            f"anatomy tested): {loc['n_called']} of {loc['n_synthetic']} volumes hold a block called a copy at rate "
            f"{loc['rate']:g}; {loc['heldout_called']} of {loc['n_heldout']} held-out scans called when left out")
    if not loc.get("n_anatomy_blocks"):
        return [f"  local copies (relict.local): no block of {loc['block_mm']:g} mm holds anatomy in half its voxels "
                "(sparse images such as angiograms): nothing tested"]
    lines = [head]
    for syn, train, patient, centre, fpr in loc["calls"][:8]:
        lines.append(f"    {syn}: block centred at ({centre}) mm ~ {train} (patient {patient}), rate {float(fpr):.3g}")
    if len(loc["calls"]) > 8:
        lines.append(f"    ... and {len(loc['calls']) - 8} more (local/local_calls.tsv)")
    c = loc.get("controls")
    if c:
        placed = loc.get("control_placement") or {}
        where = (" (placed where the donor has structure: "
                 + ", ".join(f"{n} within {k}" if k.startswith("label") else f"{n} {k}" for k, n in placed.items())
                 + ")"
                 if placed else "")
        lines.append("    positive controls, a training region pasted into each held-out scan" + where + ": called "
                     + ", ".join(f"{k} mm {v['sensitivity']:.2f}" for k, v in c.items())
                     + "; the whole-volume RMSE ratio on the same volumes: "
                     + ", ".join(f"{v['whole_volume_rmse_sensitivity']:.2f}" for v in c.values()))
        high = {k: v["by_distinctiveness"]["high"] for k, v in c.items() if v.get("by_distinctiveness")}
        if high and all(x is not None for x in high.values()):
            lines.append("    the most distinctive third of the regions (unlike the average patient): called "
                         + ", ".join(f"{k} mm {x:.2f}" for k, x in high.items()))
        for reason in (loc.get("control_reasons") or {}).values():
            lines.append(f"    {reason}")
    return lines


def reconcile_lines(v: dict) -> list[str]:
    """Where the calibrated calls find copies and a model-level measure does not, both in one place and
    why (issue 63), so that the page does not print a call next to a measure that contradicts it unread."""
    called = [sid for _, by in v.get("copied_patients", []) for sid in by]
    f = v.get("fidelity") or {}
    if not called or not f:
        return []
    n, share = len(called), len(called) / max(1, v["n_synthetic"])
    lines = []
    authentic = v.get("authentic_of") or {}
    flagged = sum(authentic.get(sid) is False for sid in called)
    if authentic and flagged < n:
        lines.append(f"    authenticity flags {flagged} of the {n} called copies: the rest lie farther from their "
                     "nearest training scan, in the encoder's embedding, than that scan's nearest other patient "
                     "(the calibrated calls compare images, aligned where alignment is on)")
    c = f.get("c_t") or {}
    if c.get("value") is not None and c["value"] >= -c["copy_z"]:
        power = c.get("power")
        why = (f"at this size it cannot: it detects {power['copy_share']:.0%} copying with probability "
               f"{power['probability']:.2f}" if power and power["probability"] < c.get("min_power", 0.0) else
               "it tests whether the samples as a whole lie nearer the training scans than held-out patients do, "
               f"and {share:.0%} copies moved that mean less than -{c['copy_z']:g}")
        lines.append(f"    C_T does not see the {n} called copies ({share:.0%} of the samples): {why}; the "
                     "calibrated calls judge each volume against the held-out scans")
    return lines


def verdict_lines(v: dict) -> list[str]:
    """The verdict as a few lines of text (terminal and figure alike); the volumes `init`
    accepted with a warning (constant, nearly empty, other units) last, where they exist, so
    that a "replica" of an empty volume is read with its cause beside it."""
    lines = [f"{v['dataset']}: {v['n_synthetic']} synthetic volumes"]
    if "combined" in v:
        c = v["combined"]
        lines.append(f"  calibrated calls (false-positive rate {v['rate']:g} against {v['n_heldout']} held-out scans): "
                     f"{c['n_copies']} volumes called copies ({c['percent_synthetic_copies'] or 0:.1f} %); "
                     f"{c['n_patients_copied']} of {c['n_training_patients']} training patients copied")
        if v.get("combined_heldout_called") is not None:  # the rule's own false positives, where they can be seen
            lines.append(f"    held-out scans called by the same rule, each judged without its patient: "
                         f"{v['combined_heldout_called']} of {v['n_heldout']} (expected about "
                         f"{v['rate'] * v['n_heldout']:.1f})")
        copied = v.get("copied_patients", [])
        for patient, by in copied[:8]:
            lines.append(f"    patient {patient}: {', '.join(by)}")
        if len(copied) > 8:
            lines.append(f"    ... and {len(copied) - 8} more patients (copies.tsv)")
        if v["n_heldout"] + 1 < 1 / v["rate"]:
            lines.append(f"    (too few held-out scans for rate {v['rate']:g}: nothing can be called; "
                         f"{int(round(1 / v['rate'])) - 1} are needed)")
    else:
        lines.append("  no calibrated calls (no held-out scans)")
    if "texture" in v:
        lines += texture_line(v["texture"], matched=bool(v.get("matched_null")))
    if "fidelity" in v:
        lines += fidelity_lines(v["fidelity"])
        lines += reconcile_lines(v)
    if "membership" in v:
        lines += membership_lines(v["membership"])
    elif "combined" not in v:
        lines.append("  membership inference: off: no held-out scans, the non-members an attack is measured against "
                     "(give patients with role heldout that the generator never saw; docs/membership.md)")
    per = []
    for m, e in v["measures"].items():
        parts = []
        if "calibrated_calls" in e:
            parts.append(f"{e['calibrated_calls']} calibrated")
        if "rating_tuned_calls" in e:
            parts.append(f"{e['rating_tuned_calls']} at the rating-tuned threshold {e['threshold']:.4g}")
        if parts:
            per.append(f"    {m}: {'; '.join(parts)}")
    if per:
        lines += ["  replicas by measure:"] + per
    if v.get("aligned") is False:
        lines.append("  augmented copies (flipped, shifted, rotated) were not searched: relict.alignment is off "
                     f"for {v['dataset']} (add it to relict.alignment.datasets); a generator trained with such "
                     "augmentations can emit copies these measures miss")
    lines += search_lines({m: e["search"] for m, e in v["measures"].items() if "search" in e})
    if "local" in v:
        lines += local_lines(v["local"])
    first = next(iter(v["measures"]))
    top = ", ".join(f"{s} ~ {t} ({score:.3g})" for s, t, score in v["measures"][first]["most_likely"])
    lines.append(f"  most likely replicas ({first}): {top}")
    warned = v.get("input_warnings") or []
    if warned:
        lines.append(f"  {len(warned)} input volume(s) accepted with a warning ({WARNINGS_FILE}, from "
                     "synthaudit init):")
        lines += [f"    {i} ({role}): {text}" for i, role, text in warned[:8]]
        if len(warned) > 8:
            lines.append(f"    ... and {len(warned) - 8} more")
    lines += v.get("time") or []
    return lines


def search_lines(searches: dict[str, dict]) -> list[str]:
    """The shortlist search's line (relict.search) and the aligned candidates' (relict.alignment), each
    with a warning where its measured recall is too low."""
    return _shortlist_lines(searches) + _aligned_lines(searches)


def _recall_lines(found: dict[str, dict], head: str, unmeasured: str, measured: str, why: str) -> list[str]:
    """One search's line: the lowest measured recall, or why none was measured; a warning below the threshold."""
    x = next(iter(found.values()))
    recalls = [s["recall_top_n"] for s in found.values()]
    if any(r is None for r in recalls):
        return [head + unmeasured]
    lines = [head + f"on {x['n_sampled']} volumes {measured}, the recall of the exact n closest is "
             f"{min(recalls):.4f} or more"]
    low = [m for m, s in found.items() if not s["recall_ok"]]
    if low:
        lines.append(f"    WARNING: recall below {x['min_recall_threshold']:g} for {', '.join(low)}: {why}")
    return lines


def _aligned_lines(searches: dict[str, dict]) -> list[str]:
    aligned = {m: x for m, x in searches.items() if x.get("mode") == "candidates"}
    if not aligned:
        return []
    k = next(iter(aligned.values()))["k"]
    return _recall_lines(
        aligned, f"  aligned ratio (relict.alignment): {', '.join(aligned)} aligned on {k} candidates per volume; ",
        "no volume was aligned to every training volume (relict.alignment.recall.sample is 0), so the candidates' "
        "recall was not measured", "aligned to every training volume",
        "close training volumes were not among the aligned candidates (their plain distance stood); raise "
        "relict.alignment.candidates")


def _shortlist_lines(searches: dict[str, dict]) -> list[str]:
    searched = {m: x for m, x in searches.items() if x.get("mode") == "shortlist"}
    if not searched:
        return []
    x = next(iter(searched.values()))
    fractions = [100 * s["pairs_fraction"] for s in searched.values()]
    changed = [s["calls_changed"] for s in searched.values() if s.get("calls_changed") is not None]
    lines = _recall_lines(
        searched, f"  shortlist search (relict.search): {', '.join(searched)} on {x['k']} candidates per volume, "
        f"{_span(fractions)} % of the pairs computed; ",
        "no volume was searched exhaustively (relict.search.recall.sample is 0), so its recall was not measured",
        "also searched exhaustively", "the shortlist missed close training volumes; raise "
        "relict.search.shortlist.factor or set relict.search.mode: exhaustive")
    if changed and all(s["recall_top_n"] is not None for s in searched.values()):
        lines[0] += f", calls changed: {sum(changed)}"
    return lines


def _span(values: list[float]) -> str:
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return low if low == high else f"{low}-{high}"

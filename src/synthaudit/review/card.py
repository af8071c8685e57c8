"""The audit card: what was audited (every input volume by SHA-256), by which synthaudit and
parameters, and what the audit and its gate concluded; one JSON file (and its Markdown reading)
that travels with a released synthetic set (``synthaudit card AUDIT_DIR``).

Why a card: a reader of a released set cannot tell which scans trained the generator and which were
held out, nor whether the files they hold are the ones audited (MONAI tutorials #1932). The card
names each file by hash, so ``synthaudit verify-card CARD FOLDER`` tells a reader whether the folder
they hold is what was audited, file by file.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import yaml

from ..io import file_sha256 as sha256

VOLUME_SUFFIXES = (".nii.gz", ".nii")


def _manifest(root: Path) -> dict[str, list[dict]]:
    """Per dataset, every volume the audit read: the user's files where they came from outside
    (init), the workflow's own where it made them (the demo's scans and samples)."""
    from ..config import load_params
    from ..workflow_plan import WorkflowPlan

    with contextlib.chdir(root):
        plan = WorkflowPlan(load_params("params.yaml"))
        out: dict[str, list[dict]] = {}
        for d in plan.datasets:
            rows = []
            p = plan.plans[d]
            if plan.training_of[d] == d:
                made = dict(zip([s.id for s in p.scans], plan.preprocessed_images(d)))
                rows += [{"role": s.role, "id": s.id, "patient_id": s.patient_id, "path": s.image or made[s.id]}
                         for s in p.scans]
            made = dict(zip([v.id for v in p.synthetic], plan.synthetic_images(d)))
            rows += [{"role": "synthetic", "id": v.id, "patient_id": "", "path": v.image or made[v.id]}
                     for v in p.synthetic]
            for r in rows:
                path = Path(r["path"])
                r["file"] = path.name
                r["sha256"] = sha256(path) if path.is_file() else None
                source = _dicom_source(path)
                if source:
                    r["dicom"] = source
            out[d] = rows
    return out


def _dicom_source(path: Path) -> dict | None:
    """The DICOM series a volume was converted from (init, synthaudit.dicom: the ``.json`` beside it),
    so that a reader holding the series, not the NIfTI, can check them against the card."""
    from ..dicom import record_of

    record = record_of(path)
    if not record.is_file():
        return None
    try:
        r = json.loads(record.read_text())
    except ValueError:
        return None
    if not isinstance(r, dict) or "series_uid" not in r:
        return None
    return {"series_folder": Path(r["source"]).name, "series_uid": r["series_uid"], "n_files": r.get("n_files"),
            "sha256": r["sha256"]}


def build(root: str | Path) -> dict:
    """The card of the audit in ``root`` (its gate: results/gate.json where ``synthaudit gate`` ran,
    else the shipped policy evaluated now)."""
    from . import gate

    root = Path(root).resolve()
    prov_path = root / "results" / "provenance.json"
    provenance = json.loads(prov_path.read_text()) if prov_path.is_file() else None
    gate_path = root / "results" / "gate.json"
    if gate_path.is_file():
        g = json.loads(gate_path.read_text())
        verdict = {"result": g["result"], "policy": g["policy"], "checks": g["checks"]}
    else:
        checks = gate.evaluate(root, gate.load_policy())
        verdict = {"result": gate.overall(checks), "policy": str(gate.default_policy()),
                   "checks": [c.__dict__ for c in checks]}
    params = yaml.safe_load((root / "params.yaml").read_text())
    generators = {d: ("synthaudit's latent diffusion model (trained in this workflow)"
                      if (ds.get("synthetic") or {}).get("ldm") else (ds.get("generator") or None))
                  for d, ds in params["datasets"].items()}
    numbers = {}
    for name in ("copies", "fidelity"):
        path = root / "results" / "metrics" / f"{name}.json"
        if path.is_file():
            for d, e in json.loads(path.read_text()).items():
                keep = {"copies": ("n_copies", "n_patients_copied", "rate", "n_heldout", "local_n_called"),
                        "fidelity": ("c_t",)}[name]
                numbers.setdefault(d, {}).update({k: e[k] for k in keep if k in e})
                if name == "fidelity":
                    for m in ("frechet_distance", "frd", "authenticity"):
                        if m in e:
                            numbers[d][m] = {"value": e[m]["value"], "floor": e[m]["floor"]}
    for d, m in membership_numbers(root).items():
        numbers.setdefault(d, {})["membership_auc"] = m
    return {"card": "synthaudit audit card", "version": 1, "provenance": provenance,
            "gate": verdict, "generators": generators, "key_numbers": numbers, "files": _manifest(root)}


def membership_numbers(root: Path) -> dict[str, dict]:
    """Per set, the strongest membership attack (the highest AUC; synthaudit.membership) with its interval and
    the patients on each side: can the samples tell who trained the generator?"""
    path = Path(root) / "results" / "metrics" / "membership.json"
    out = {}
    for d, e in (json.loads(path.read_text()) if path.is_file() else {}).items():
        aucs = {k: a for k, a in e.items() if isinstance(a, dict) and "auc" in a}
        if aucs:
            name = max(aucs, key=lambda k: (aucs[k]["auc"], k))
            out[d] = {"attack": name, "value": aucs[name]["auc"], "ci": [aucs[name]["auc_ci_low"],
                                                                         aucs[name]["auc_ci_high"]],
                      "members": e["members"], "nonmembers": e["nonmembers"]}
    return out


def markdown(card: dict) -> str:
    lines = ["# Audit card", ""]
    prov = card["provenance"] or {}
    lines += [f"- synthaudit {prov.get('version', '?')}, params SHA-256 `{prov.get('params_sha256', '?')}`, "
              f"{prov.get('numerics', '?')} numerics on {prov.get('device', '?')}",
              f"- gate: **{card['gate']['result'].upper()}** (policy `{card['gate']['policy']}`)", ""]
    for d, rows in card["files"].items():
        roles = {}
        for r in rows:
            roles[r["role"]] = roles.get(r["role"], 0) + 1
        lines.append(f"## {d}")
        lines.append("")
        lines.append(f"- generator: {card['generators'].get(d) or 'not stated'}")
        lines.append("- files: " + ", ".join(f"{n} {role}" for role, n in roles.items()) + " (SHA-256 in the JSON card)")
        for k, v in (card["key_numbers"].get(d) or {}).items():
            if k == "membership_auc":
                lines.append(f"- membership inference, strongest attack ({v['attack']}): AUC {v['value']:.3g} "
                             f"[{v['ci'][0]:.3g}, {v['ci'][1]:.3g}] on {v['members']} member and {v['nonmembers']} "
                             "non-member patients")
                continue
            lines.append(f"- {k}: " + (f"{v['value']:.4g} (held-out floor {v['floor']:.4g})" if isinstance(v, dict)
                                        else f"{v}"))
        failed = [c for c in card["gate"]["checks"] if c["dataset"] == d and c["verdict"] != "pass"]
        for c in failed:
            lines.append(f"- gate rule {c['rule']}: {c['verdict']} (value {c['value']}, limit {c['limit']}"
                         + (f"; {c['why']})" if c.get("why") else ")"))
        lines.append("")
    return "\n".join(lines)


def write(root: str | Path) -> dict:
    from ..io import write_json, write_text

    root = Path(root)
    card = build(root)
    write_json(root / "results" / "audit_card.json", card)
    write_text(root / "results" / "audit_card.md", markdown(card))
    return card


def verify(card_path: str | Path, folder: str | Path) -> tuple[list[str], int]:
    """Each volume in ``folder`` against the card: lines to print and the exit status (0: every file
    is on the card with its hash; 1: a file differs or is not on the card)."""
    card = json.loads(Path(card_path).read_text())
    by_name: dict[str, list[dict]] = {}
    for d, rows in card["files"].items():
        for r in rows:
            by_name.setdefault(r["file"], []).append({**r, "dataset": d})
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name.endswith(VOLUME_SUFFIXES))
    if not files:
        return _verify_series(card, folder)
    lines, bad = [], 0
    for p in files:
        known = by_name.get(p.name)
        if not known:
            lines.append(f"NOT ON CARD  {p}")
            bad += 1
            continue
        h = sha256(p)
        match = [r for r in known if r["sha256"] == h]
        if match:
            lines.append(f"matches      {p} ({match[0]['dataset']} {match[0]['role']} {match[0]['id']})")
        else:
            lines.append(f"CHANGED      {p}: SHA-256 {h[:16]}..., the card's {known[0]['sha256'][:16] if known[0]['sha256'] else 'none'}...")
            bad += 1
    lines.append(f"{len(files) - bad} of {len(files)} volume(s) match the card" if files else f"{folder}: no volumes")
    return lines, 1 if bad or not files else 0


def _verify_series(card: dict, folder: str | Path) -> tuple[list[str], int]:
    """:func:`verify` for a folder of DICOM series (the inputs as the reader holds them): each series'
    files hashed as init's conversion hashed them (synthaudit.dicom.sources_digest), against the card's
    ``dicom`` records."""
    from .. import dicom

    known = {r["dicom"]["sha256"]: {**r, "dataset": d} for d, rows in card["files"].items() for r in rows
             if r.get("dicom")}
    try:
        found = dicom.series_folders(folder)
    except (OSError, RuntimeError):
        found = []
    if not found:
        return [f"{folder}: no volumes (no NIfTI files, no DICOM series)"], 1
    lines, bad = [], 0
    for s in found:
        try:
            digest = dicom.sources_digest(dicom.find_series(s).files)
        except dicom.DicomError as e:
            lines.append(f"UNREADABLE   {e}")
            bad += 1
            continue
        r = known.get(digest)
        if r:
            lines.append(f"matches      {s} (DICOM series; {r['dataset']} {r['role']} {r['id']})")
        else:
            lines.append(f"NOT ON CARD  {s}: no series on the card has these files (SHA-256 {digest[:16]}...)")
            bad += 1
    lines.append(f"{len(found) - bad} of {len(found)} DICOM series match the card")
    return lines, 1 if bad else 0

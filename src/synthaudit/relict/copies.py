"""Per-patient copy counts from calibrated replica calls (Dar et al.'s headline numbers).

Why: a reviewer asks two questions of a synthetic set - how many of the generated volumes
are copies, and how many training patients were copied at all - and, for a patient who
was, by how many volumes. A calibrated call (:mod:`.calibration`) says *whether* a volume is
a copy; its closest training scan says *of whom*. Counting per training patient (not per
scan: a patient's baseline and follow-up are one person) gives the table; the two
percentages are Dar et al.'s: the share of training patients copied at least once, and the
share of synthetic volumes that are copies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

COLUMNS_FIXED = ["patient_id", "n_training_scans"]


def copy_table(patient_of: Mapping[str, str], calls: Mapping[str, Sequence[tuple[str, bool, str]]],
               combined: Sequence[tuple[str, bool, str]] | None = None) -> tuple[list[dict], list[str]]:
    """Copies per training patient, by measure and combined.

    Args:
        patient_of: Training scan id -> patient id (every training scan).
        calls: ``{measure: [(synthetic_id, called, closest_training_id), ...]}``.
        combined: ``[(synthetic_id, called, attributed_training_id), ...]`` of the combined
            call, or None.

    Returns:
        ``(rows, columns)``: one row per training patient (most copied first, then by id)
        with ``n_training_scans``, ``<measure>_copies`` per measure, ``combined_copies`` and
        ``copied_by`` (the synthetic ids of its combined calls, or of any measure's when there
        is no combined call).
    """
    patients = sorted(set(patient_of.values()))
    scans = {p: sum(1 for q in patient_of.values() if q == p) for p in patients}
    rows = {p: {"patient_id": p, "n_training_scans": scans[p]} for p in patients}
    by: dict[str, set[str]] = {p: set() for p in patients}
    for measure, entries in calls.items():
        for p in patients:
            rows[p][f"{measure}_copies"] = 0
        for synthetic_id, called, closest in entries:
            if called:
                patient = _patient(patient_of, closest, measure)
                rows[patient][f"{measure}_copies"] += 1
                if combined is None:
                    by[patient].add(synthetic_id)
    columns = COLUMNS_FIXED + [f"{m}_copies" for m in calls]
    if combined is not None:
        for p in patients:
            rows[p]["combined_copies"] = 0
        for synthetic_id, called, closest in combined:
            if called:
                patient = _patient(patient_of, closest, "combined")
                rows[patient]["combined_copies"] += 1
                by[patient].add(synthetic_id)
        columns.append("combined_copies")
    for p in patients:
        rows[p]["copied_by"] = " ".join(sorted(by[p]))
    columns.append("copied_by")
    key = "combined_copies" if combined is not None else None
    ordered = sorted(rows.values(), key=lambda r: (-(r[key] if key else sum(
        v for k, v in r.items() if k.endswith("_copies"))), r["patient_id"]))
    return ordered, columns


def headline(patient_of: Mapping[str, str], entries: Sequence[tuple[str, bool, str]]) -> dict:
    """Dar et al.'s numbers for one kind of call: copies among synthetic volumes, patients copied."""
    n_synthetic = len(entries)
    called = [(s, t) for s, c, t in entries if c]
    copied = {_patient(patient_of, t, "calls") for _, t in called}
    n_patients = len(set(patient_of.values()))
    return {"n_synthetic": n_synthetic, "n_copies": len(called),
            "percent_synthetic_copies": 100.0 * len(called) / n_synthetic if n_synthetic else None,
            "n_training_patients": n_patients, "n_patients_copied": len(copied),
            "percent_patients_copied": 100.0 * len(copied) / n_patients if n_patients else None}


def _patient(patient_of: Mapping[str, str], training_id: str, what: str) -> str:
    try:
        return patient_of[training_id]
    except KeyError:
        raise KeyError(f"{what}: closest training scan {training_id!r} is not in the training set") from None

"""The demo cohorts' tables (which scans exist, whose they are, which are held out), without the simulation.

Why a module of its own: Snakemake plans every job from these tables when it parses the workflow, at every
start (a run, a dry run, each test that starts one); the simulations (:mod:`.ncct`, :mod:`.tof`) import
SciPy's image and spline modules, 0.5 s that no table needs.
"""

from __future__ import annotations

from . import heldout_indices

SESSIONS = {"baseline": "bl", "followup": "fu"}  # the NCCT demo's session name -> scan id suffix


def patient_id(index: int) -> str:
    """``p003`` for patient 3; fixed width so ids sort and never depend on the cohort size."""
    return f"p{index:03d}"


def subject_id(index: int) -> str:
    """``s003`` for subject 3; fixed width so ids sort and never depend on the cohort size."""
    return f"s{index:03d}"


def ncct_table(cfg: dict) -> list[dict]:
    """One row per scan of the NCCT demo cohort, without simulating anything.

    Snakemake calls this at parse time, so it must stay pure and fast. Held-out patients
    (never in the training set; the non-replica source) are a seeded permutation, and
    both scans of a patient share the role so no patient straddles the split.

    Args:
        cfg: The ``datasets.<name>.demo`` section of params.yaml.

    Returns:
        Rows with keys ``id`` (``p003_bl``), ``patient_id`` (``p003``), ``session``
        (``baseline``/``followup``) and ``role`` (``train``/``heldout``), ordered by
        patient then session.

    Raises:
        ValueError: If ``n_heldout_patients`` would leave no training patient or is < 0.
    """
    n_patients = int(cfg["n_patients"])
    n_heldout = int(cfg["n_heldout_patients"])
    heldout = heldout_indices(n_patients, n_heldout, cfg["seed"], "n_heldout_patients", "patient")
    rows = []
    for index in range(1, n_patients + 1):
        patient = patient_id(index)
        role = "heldout" if index - 1 in heldout else "train"
        for session, suffix in SESSIONS.items():
            rows.append({"id": f"{patient}_{suffix}", "patient_id": patient, "session": session, "role": role})
    return rows


def tof_table(cfg: dict) -> list[dict]:
    """One row per subject of the TOF demo cohort (one scan each), without simulating anything.

    Snakemake calls this at parse time, so it must stay pure and fast. Held-out subjects
    (never in the training set; the non-replica source) are a seeded permutation.

    Args:
        cfg: The ``datasets.<name>.demo`` section of params.yaml.

    Returns:
        Rows with keys ``id`` and ``patient_id`` (both ``s003``), ``session``
        (``baseline``) and ``role`` (``train``/``heldout``), ordered by subject.

    Raises:
        ValueError: If ``n_heldout_subjects`` would leave no training subject or is < 0.
    """
    n_subjects = int(cfg["n_subjects"])
    n_heldout = int(cfg["n_heldout_subjects"])
    heldout = heldout_indices(n_subjects, n_heldout, cfg["seed"], "n_heldout_subjects", "subject")
    return [
        {
            "id": subject_id(index),
            "patient_id": subject_id(index),
            "session": "baseline",
            "role": "heldout" if index - 1 in heldout else "train",
        }
        for index in range(1, n_subjects + 1)
    ]

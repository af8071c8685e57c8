"""The CI check that the committed metrics are what the demo produces (.ci/check_baseline.py):
it names every number beyond the tolerance, and lets the last digits of another machine pass."""

import importlib.util
import json

from workflow_helpers import ROOT

spec = importlib.util.spec_from_file_location("check_baseline", ROOT / ".ci" / "check_baseline.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_json_differences_beyond_the_tolerance_are_named_within_it_pass():
    old = json.dumps({"synthaudit": {"version": "0.2.0"}, "ncct_demo": {"mae": {"min_score": 0.23439, "n": 12}}})
    drift = json.dumps({"synthaudit": {"version": "0.2.0"}, "ncct_demo": {"mae": {"min_score": 0.234390001, "n": 12}}})
    moved = json.dumps({"synthaudit": {"version": "0.3.0"}, "ncct_demo": {"mae": {"min_score": 0.23398, "n": 12}}})
    assert check.compare_json("relict.json", old, drift, rtol=1e-4) == []
    problems = check.compare_json("relict.json", old, moved, rtol=1e-4)
    assert problems == ["relict.json: ncct_demo.mae.min_score committed 0.23439, demo 0.23398",
                        "relict.json: synthaudit.version committed '0.2.0', demo '0.3.0'"]


def test_json_keys_added_or_lost_and_nan_are_differences():
    assert check.compare_json("m.json", '{"a": 1}', '{"b": 1}', 1e-4) == [
        "m.json: a is in the committed file only", "m.json: b is new (not in the committed file)"]
    assert check.differs(float("nan"), float("nan"), 1e-4) is False
    assert check.differs(float("nan"), 1.0, 1e-4) is True
    assert check.differs(None, 0.0, 1e-4) is True


def test_tsv_cells_are_compared_by_value_and_named_by_row_and_column():
    old = "threshold\tbalanced_accuracy\n0.01\t0.5\n0.02\t0.75\n"
    same = "threshold\tbalanced_accuracy\n0.010\t0.5\n0.02\t0.7500000001\n"
    moved = "threshold\tbalanced_accuracy\n0.01\t0.5\n0.02\t0.8\n"
    assert check.compare_tsv("s.tsv", old, same, 1e-4) == []
    assert check.compare_tsv("s.tsv", old, moved, 1e-4) == ["s.tsv: row 3 balanced_accuracy committed '0.75', demo '0.8'"]
    assert check.compare_tsv("s.tsv", old, old + "0.03\t1\n", 1e-4)  # a row more


# Snakemake 9's dry run (--quiet rules) after relict.local.smooth_min_vox changed under outputs that a
# `--rerun-triggers mtime` run had left (the state that passed here and failed CI's clean run)
_DRY_RUN_AFTER_A_PARAMS_CHANGE = """
Job stats:
job               count
--------------  -------
provenance            1
relict_local          6
all                   1
total                 8

Reasons:
    (check individual jobs above for details)
    input files updated by another job:
        all
    params have changed since last execution:
        provenance, relict_local
Some jobs were triggered by provenance information, see 'reason' section in the rule displays above.
Rules with provenance triggered jobs: provenance relict_local

This was a dry-run (flag -n). The order of jobs does not reflect the order of execution.
"""


def test_a_dry_run_with_jobs_due_names_them_by_reason_and_one_with_nothing_to_do_passes():
    reasons = check.stale_reasons(_DRY_RUN_AFTER_A_PARAMS_CHANGE)
    assert reasons == ["input files updated by another job: all",
                       "params have changed since last execution: provenance, relict_local"]
    assert check.stale_reasons("Building DAG of jobs...\nNothing to be done (all requested files are present "
                               "and up to date).\n") == []
    # a form it cannot parse still fails, with the text
    assert check.stale_reasons("Job stats:\njob count\nall 1\n")[0].startswith("the dry run would run jobs")


def test_the_dry_run_asks_only_for_the_targets_that_were_run(monkeypatch):
    """CI's make demo-check runs the demo without its feature-level study (--targets all): asking the
    dry run for feature_study_all too would name the study's jobs, due for their missing outputs."""
    asked = []

    class Done:
        returncode, stdout, stderr = 0, "Nothing to be done (all requested files are present and up to date).\n", ""

    def run(cmd, **kwargs):
        asked.append(cmd)
        return Done()

    monkeypatch.setattr(check.subprocess, "run", run)
    assert check.stale_outputs(("all",)) == []
    assert asked[-1][-2:] == ["--", "all"]
    assert check.stale_outputs() == []
    assert asked[-1][-3:] == ["--", "all", "feature_study_all"]

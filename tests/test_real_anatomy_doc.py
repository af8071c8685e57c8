"""docs/real_anatomy.md's matched-null table is the committed benchmark's JSON, not typed in."""

from __future__ import annotations

import importlib.util
import json

import pytest

from workflow_helpers import ROOT

spec = importlib.util.spec_from_file_location("blur_table", ROOT / "bench/real_anatomy/blur_table.py")
blur_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(blur_table)


def test_the_pages_blur_table_equals_the_committed_benchmark_json():
    page = (ROOT / blur_table.PAGE).read_text()
    table = blur_table.markdown(json.loads((ROOT / blur_table.RESULT).read_text()))
    assert blur_table.page_with_table(page, table) == page, (
        f"{blur_table.PAGE}'s table differs from {blur_table.RESULT}: run "
        "`.venv/bin/python bench/real_anatomy/blur_table.py doc --write`")


def test_the_table_gives_both_nulls_per_blur_with_the_fit():
    kinds = {k: {"n": 4, "called": 4} for k in blur_table.KINDS}
    tally = {**kinds, "new": {"n": 28, "called": 1}, "augmented_sensitivity": 1.0, "sensitivity": 1.0,
             "specificity": 27 / 28}
    res = {"n_heldout": 20, "sets": {"cohort": {"generator_blur_vox": 0.6, "fitted": {"blur_vox": 0.54, "noise_sd": 0.019},
                              "matched": {"combined": tally, "heldout_called": 1},
                              "as_they_are": {"combined": {**tally, "new": {"n": 28, "called": 11},
                                                           "specificity": 17 / 28}, "heldout_called": 1}}}}
    per = {"mae": {"new": {"n": 28, "called": 4}}}
    res["measures"] = ["mae"]
    res["sets"]["cohort"]["as_they_are"]["per_measure"] = per
    res["sets"]["cohort"]["matched"]["per_measure"] = {"mae": {"new": {"n": 28, "called": 1}}}
    table = blur_table.markdown(res)
    assert "| 0.6 | 4 → 1 |" in table
    assert "| 0.6 | 0.54 / 0.019 | as they are | 4/4 | 4/4 | 4/4 | 4/4 | 4/4 | 1.00 | 11/28 | 0.607 | 1/20 |" in table
    assert "| 0.6 | 0.54 / 0.019 | matched | 4/4 | 4/4 | 4/4 | 4/4 | 4/4 | 1.00 | 1/28 | 0.964 | 1/20 |" in table


def test_the_fidelity_pages_degradation_table_equals_the_committed_benchmark_json():
    fspec = importlib.util.spec_from_file_location("fidelity_table", ROOT / "bench/real_anatomy/fidelity_table.py")
    fidelity_table = importlib.util.module_from_spec(fspec)
    fspec.loader.exec_module(fidelity_table)
    assert fidelity_table.doc(write=False) == 0, (
        f"{fidelity_table.PAGE}'s table differs from {fidelity_table.RESULT}: run "
        "`.venv/bin/python bench/real_anatomy/fidelity_table.py doc --write`")
    res = json.loads((ROOT / fidelity_table.RESULT).read_text())
    # what the page says of it: the held-out scans at the floor, authenticity falling with the copies
    held = res["sets"]["held-out scans"]["measures"]
    assert held["frechet_distance"]["value"] == pytest.approx(res["floor"]["frechet_distance"]["value"])
    shares = [res["sets"][f"{p} % copies"]["measures"]["authenticity"]["value"] for p in (5, 10, 20)]
    assert shares == sorted(shares, reverse=True) and shares[0] < held["authenticity"]["value"]

"""The README's demo tables are the committed metrics, not typed numbers."""

import json

import pytest

from synthaudit.review import readme_tables as rt
from workflow_helpers import ROOT as REPO


def test_readme_tables_equal_the_committed_metrics():
    readme = (REPO / "README.md").read_text()
    generated = rt.tables(REPO / "results/metrics")
    assert rt.replace(readme, generated) == readme, (
        "README.md's demo tables differ from results/metrics/: run "
        "`python -m synthaudit.review.readme_tables --write README.md`")


def test_tables_format_pairs_and_missing_cells(tmp_path):
    relict = {"ncct_demo": {"mae": {"balanced_accuracy": 0.961538, "auc": 1.0, "calibrated_sensitivity": 0.5,
                                    "calibrated_specificity": 0.25}}}
    copies = {"ncct_demo": {"sensitivity": 1.0, "specificity": 0.75, "percent_synthetic_copies": 54.5,
                            "percent_patients_copied": 81.8}}
    (tmp_path / "relict.json").write_text(json.dumps(relict))
    (tmp_path / "copies.json").write_text(json.dumps(copies))
    t = rt.tables(tmp_path)
    row = t["demo-rating"].splitlines()[2].split(" | ")
    assert row[1] == "0.96 / 1.00" and row[2] == "–"
    cal = t["demo-calibrated"].splitlines()[2]
    assert "0.50 / 0.25" in cal and cal.endswith("| 1.00 / 0.75 | 54 % / 82 % |")
    for table in t.values():  # the delimiter row has exactly as many cells as the header
        head, delim = table.splitlines()[:2]
        assert head.count("|") == delim.count("|")
    with pytest.raises(ValueError, match="no block"):
        rt.replace("no markers here", t)

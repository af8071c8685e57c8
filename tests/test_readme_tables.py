"""The demo's results tables (docs/demo_results.md) are the committed metrics, not typed numbers."""

import json

import pytest

from synthaudit.review import readme_tables as rt
from workflow_helpers import ROOT as REPO


def test_demo_results_tables_equal_the_committed_metrics():
    page = REPO / rt.TARGET
    text = page.read_text(encoding="utf-8")
    generated = rt.tables(REPO / "results/metrics")
    assert rt.replace(text, generated) == text, (
        f"{rt.TARGET}'s demo tables differ from results/metrics/: run "
        "`python -m synthaudit.review.readme_tables --write`")


def test_the_readme_holds_no_stale_copy_of_the_tables():
    """The tables live in one place; a copy left in the README would go stale unchecked."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name in ("demo-rating", "demo-calibrated"):
        assert f"<!-- {name}:" not in readme


def test_write_updates_the_page_in_place(tmp_path, monkeypatch):
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics/relict.json").write_text(json.dumps({"ncct_demo": {"mae": {"balanced_accuracy": 1.0,
                                                                                    "auc": 0.5}}}))
    (tmp_path / "metrics/copies.json").write_text("{}")
    page = tmp_path / rt.TARGET
    page.parent.mkdir()
    page.write_text("intro\n<!-- demo-rating: old -->\nold\n<!-- /demo-rating -->\n"
                    "<!-- demo-calibrated: old -->\nold\n<!-- /demo-calibrated -->\n"
                    "<!-- demo-local: old -->\nold\n<!-- /demo-local -->\nend\n")
    monkeypatch.chdir(tmp_path)
    assert rt.main(["--write", "--metrics", "metrics"]) == 0  # the default page
    text = page.read_text()
    assert "| ncct_demo | 1.00 / 0.50 |" in text and text.startswith("intro\n") and text.endswith("end\n")
    assert f"--write {rt.TARGET.as_posix()}` from results/metrics/ -->" in text
    assert rt.replace(text, rt.tables(tmp_path / "metrics")) == text


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


def test_the_local_table_gives_each_datasets_controls_and_leaves_out_those_without():
    copies = {"ncct_demo": {"local_n_called": 8, "local_heldout_false_positive_rate": 1 / 22,
                            "local_control_20mm_sensitivity": 20 / 22, "local_control_20mm_distinctive_sensitivity": 1.0,
                            "local_control_20mm_whole_volume_rmse_sensitivity": 1 / 22},
              "tof_demo": {"local_n_called": 0, "local_heldout_false_positive_rate": 0.0},
              "other": {"n_copies": 3}}  # no local level: no row
    table = rt.local_table(copies)
    assert "| ncct_demo | 8 | 0.05 | 0.91 (1.00) / 0.05 |" in table
    assert "| tof_demo | 0 | 0.00 | – |" in table and "other" not in table
    assert "20 mm controls: local (distinctive third) / whole-volume RMSE" in table

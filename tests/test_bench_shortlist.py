"""The shortlist scale bench's plumbing (bench/synthaudit_bench/shortlist_scale.py) on a tiny cohort:
its pair counts, its recall against the exhaustive matrices it computes, and the projection's arithmetic."""

import json
import math

import pytest

from synthaudit_bench import shortlist_scale


def test_tiny_run_counts_pairs_and_projects(tmp_path):
    out_file = tmp_path / "s.json"
    shortlist_scale.main(["--n-training", "40", "--n-synthetic", "8", "--n-heldout", "4", "--n-replicas", "2",
                          "--n", "5", "--factor", "2", "--sample", "2", "--spacing", "12", "--measures", "mae", "ssim",
                          "--sweep-block-mm", "24", "--sweep-factors", "2", "--cohort-root", str(tmp_path / "c"),
                          "--out", str(out_file)])
    out = json.loads(out_file.read_text())
    c = out["cohort"]
    rows = c["n_synthetic"] + c["n_heldout"]
    assert out["settings"]["k"] == 10
    for m in ("mae", "ssim"):
        r = out["measures"][m]
        assert r["exhaustive"]["pairs"] == rows * 40
        assert r["shortlist"]["candidate_pairs"] == rows * 10
        # the 2 + 2 sampled rows add their non-candidate pairs
        assert r["shortlist"]["pairs"] == rows * 10 + 4 * (40 - 10)
        assert 0 <= r["recall_top_n_all_synthetic"] <= 1 and r["calls_changed"] >= 0
    p = out["projection"][0]
    assert p["pairs_exhaustive"] == 50_000_000 and p["pairs_shortlist"] == 5_000 * 10 + 2 * 10_000
    assert p["exhaustive_h_1_node"] == pytest.approx(5e7 * p["s_per_pair_1mm"] / 3600)
    assert out["projection_measured_1mm"][0]["s_per_pair_1mm"] == 0.00051
    assert out["sweep"][0]["k"] == 10 and math.isclose(out["sweep"][0]["candidate_fraction"], 0.25)
    assert (tmp_path / "s.md").read_text().startswith("Cohort: 40 training")

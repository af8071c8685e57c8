"""The review tables (synthaudit.review.tables) on hand-made inputs with known answers:
Table 2 runtimes from fake benchmark files, closest-volume agreement, the combined
ranking, tuned thresholds and the filter (with its refusals), and the rating import."""

import json
import math

import pytest

from synthaudit.io import read_tsv, write_json
from synthaudit.ratings import read_ratings_by_rater
from synthaudit.review import tables
from synthaudit.relict.ranking import read_ranking
from synthaudit.review.tables import FilterError, ReviewError

BENCH_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(tmp_path, name, *rows):
    """A Snakemake benchmark file; rows are (s, max_rss, cpu_time), '-' where not measured."""
    p = tmp_path / f"{name}.tsv"
    p.write_text(BENCH_HEADER + "".join(f"{s}\t0:00:00\t{rss}\t1.0\t1.0\t1.0\t0.0\t0.0\t50.0\t{cpu}\n"
                                        for s, rss, cpu in rows))
    return p


def _ranking(closest, scores=None):
    """Ranking rows from {synthetic_id: closest_training_id}; rank follows the score (default: id order)."""
    ids = list(closest)
    scores = scores or {i: float(k) for k, i in enumerate(ids)}
    order = sorted(ids, key=lambda i: (scores[i], i))
    return [{"synthetic_id": i, "closest_training_id": closest[i], "score": scores[i], "ratio": scores[i],
             "rank": order.index(i) + 1, "n_used": 4} for i in ids]


# ---- Table 2: runtime -------------------------------------------------------------

def test_read_benchmark_averages_repeats_and_tolerates_unmeasured(tmp_path):
    b = tables.read_benchmark(_bench(tmp_path, "b", (10.0, 100.0, 8.0), (20.0, 300.0, "-")))
    assert b == {"s": 15.0, "cpu_time_s": 8.0, "max_rss_mb": 300.0, "repeats": 2}
    b = tables.read_benchmark(_bench(tmp_path, "c", (3.0, "NA", "NA")))
    assert b["cpu_time_s"] is None and b["max_rss_mb"] is None
    bad = tmp_path / "bad.tsv"
    bad.write_text("x\ty\n1\t2\n")
    with pytest.raises(ReviewError, match="bad.tsv: not a Snakemake benchmark"):
        tables.read_benchmark(bad)


def test_combine_benchmarks_adds_times_and_keeps_the_peak():
    c = tables.combine_benchmarks([{"s": 2.0, "cpu_time_s": 1.0, "max_rss_mb": 50.0},
                                   {"s": 3.0, "cpu_time_s": None, "max_rss_mb": 80.0}])
    assert c == {"s": 5.0, "cpu_time_s": 1.0, "max_rss_mb": 80.0, "jobs": 2}
    assert tables.combine_benchmarks([]) is None


def test_runtime_table_adds_extraction_per_level(tmp_path):
    compare = {m: tables.read_benchmark(_bench(tmp_path, m, (s, 200.0, s / 2)))
               for m, s in [("rmse", 120.0), ("emb_cosine", 6.0), ("dice_binary", 30.0)]}
    embed = tables.combine_benchmarks([tables.read_benchmark(_bench(tmp_path, "train", (90.0, 900.0, 80.0))),
                                       tables.read_benchmark(_bench(tmp_path, "syn", (24.0, 500.0, 20.0)))])
    rows = {r["measure"]: r for r in tables.runtime_table(["rmse", "emb_cosine", "dice_binary"], compare, embed,
                                                          segment=None, segment_note="labels given")}
    assert rows["rmse"]["extraction_s"] == 0 and rows["rmse"]["total_min"] == pytest.approx(2.0)
    assert rows["rmse"]["level"] == "image" and rows["rmse"]["note"] == ""
    e = rows["emb_cosine"]
    assert (e["compare_s"], e["extraction_s"], e["total_s"]) == (6.0, 114.0, 120.0)
    assert e["total_min"] == pytest.approx(2.0)
    assert e["cpu_time_s"] == pytest.approx(3.0 + 80.0 + 20.0)
    assert e["max_rss_mb"] == 900.0  # peak over the comparison and the embedding jobs
    d = rows["dice_binary"]  # label maps given: no segmentation job, extraction 0 and a note
    assert d["extraction_s"] == 0 and d["total_s"] == 30.0 and d["note"] == "labels given"
    # label maps by a U-Net: one job per volume (summed); its training is reported apart
    seg = tables.combine_benchmarks([tables.read_benchmark(_bench(tmp_path, f"v{i}", (90.0, 2000.0, 100.0)))
                                     for i in range(3)])
    train = tables.read_benchmark(_bench(tmp_path, "unet", (600.0, 3000.0, 1000.0)))
    d = tables.runtime_table(["dice_binary"], compare, segment=seg, segment_training=train)[0]
    assert d["extraction_s"] == 270.0 and d["total_min"] == pytest.approx(5.0) and d["max_rss_mb"] == 2000.0
    assert d["model_training_s"] == 600.0 and "not in the total" in d["note"]
    assert rows["rmse"]["model_training_s"] is None


def test_runtime_table_refuses_missing_benchmarks(tmp_path):
    compare = {"emb_rmse": tables.read_benchmark(_bench(tmp_path, "e", (1.0, 1.0, 1.0)))}
    with pytest.raises(ReviewError, match="emb_rmse: feature-level measure without the embedding"):
        tables.runtime_table(["emb_rmse"], compare, embed=None)
    with pytest.raises(ReviewError, match="mae: no benchmark"):
        tables.runtime_table(["mae"], compare)


def test_runtime_overview_is_measures_by_datasets_in_registry_order():
    per = {"ncct": [{"measure": "ssim", "total_min": 76.04}, {"measure": "mae", "total_min": 16.0}],
           "tof": [{"measure": "mae", "total_min": "2.0"}, {"measure": "asd_binary", "total_min": "16"}]}
    rows, cols = tables.runtime_overview(per)
    assert cols == ["measure", "label", "level", "ncct", "tof"]
    assert [r["measure"] for r in rows] == ["mae", "ssim", "asd_binary"]
    assert rows[0]["ncct"] == 16.0 and rows[0]["tof"] == 2.0
    assert rows[1]["ncct"] == 76.04 and rows[1]["tof"] is None  # the paper's "-"
    assert rows[2]["ncct"] is None and rows[2]["level"] == "segmentation"


# ---- closest-volume agreement --------------------------------------------------------

RANKINGS = {
    "rmse": _ranking({"s1": "t1", "s2": "t2", "s3": "t3", "s4": "t4"}),
    "mae": _ranking({"s1": "t1", "s2": "t2", "s3": "t3", "s4": "t9"}),
    "ssim": _ranking({"s1": "t1", "s2": "t2", "s3": "t7", "s4": "t4"}),
}


def test_closest_agreement_counts():
    s = tables.closest_agreement(RANKINGS, "rmse")
    assert s["n_synthetic"] == 4
    assert {m: p["n_same"] for m, p in s["per_measure"].items()} == {"rmse": 4, "mae": 3, "ssim": 3}
    assert s["n_all_agree"] == 2 and s["fraction_all_agree"] == 0.5
    assert [d["synthetic_id"] for d in s["disagreements"]] == ["s3", "s4"]
    assert s["disagreements"][1]["closest"] == {"rmse": "t4", "mae": "t9", "ssim": "t4"}
    rows = tables.closest_agreement_rows(s)
    assert [(r["measure"], r["n_same_closest"]) for r in rows] == [("rmse", 4), ("mae", 3), ("ssim", 3), ("all", 2)]
    # against MAE, SSIM agrees on s1, s2 only
    assert tables.closest_agreement(RANKINGS, "mae")["per_measure"]["ssim"]["n_same"] == 2


def test_closest_agreement_refuses_mismatched_rankings():
    with pytest.raises(ReviewError, match="reference measure 'dice_binary' is not among"):
        tables.closest_agreement(RANKINGS, "dice_binary")
    other = dict(RANKINGS, mae=_ranking({"s1": "t1", "s2": "t2", "s3": "t3", "s5": "t4"}))
    with pytest.raises(ReviewError, match="rankings of rmse and mae rank different synthetic volumes"):
        tables.closest_agreement(other, "rmse")


def test_resolve_measure_and_figure6_choice():
    assert tables.resolve_measure("rmse", ["mae", "rmse"]) == ("rmse", None)
    m, note = tables.resolve_measure("rmse", ["dice_binary", "asd_binary"])
    assert m == "dice_binary" and "rmse is not computed" in note
    assert tables.figure6_choice(None, "a") is None
    assert tables.figure6_choice("s3", "a") == "s3"
    assert tables.figure6_choice({"a": "s3"}, "a") == "s3" and tables.figure6_choice({"a": "s3"}, "b") is None


# ---- combined ranking ---------------------------------------------------------------

def _combined_inputs():
    closest = {"s1": "t1", "s2": "t2", "s3": "t3", "s4": "t4"}
    return {
        # rmse ranks s1 s2 s3 s4, mae s2 s1 s4 s3, ssim s3 s2 s1 s4
        "rmse": _ranking(closest, {"s1": 0.1, "s2": 0.2, "s3": 0.5, "s4": 0.9}),
        "mae": _ranking(closest, {"s1": 0.3, "s2": 0.2, "s3": 0.8, "s4": 0.6}),
        "ssim": _ranking(closest, {"s1": 0.4, "s2": 0.3, "s3": 0.1, "s4": 0.7}),
    }


def test_combined_ranking_order_mean_rank_and_calls():
    rows = tables.combined_ranking(_combined_inputs(), {"rmse": 0.25, "mae": 0.25, "ssim": None})
    # mean ranks: s1 (1+2+3)/3 = 2, s2 (2+1+2)/3 = 5/3, s3 (3+4+1)/3 = 8/3, s4 (4+3+4)/3 = 11/3
    assert [r["synthetic_id"] for r in rows] == ["s2", "s1", "s3", "s4"]
    assert [r["mean_rank"] for r in rows] == pytest.approx([5 / 3, 2.0, 8 / 3, 11 / 3])
    by = {r["synthetic_id"]: r for r in rows}
    assert by["s2"]["n_replica_calls"] == 2 and by["s1"]["n_replica_calls"] == 1  # s1: mae 0.3 > 0.25
    assert by["s1"]["rmse_replica"] == 1 and by["s1"]["mae_replica"] == 0 and by["s1"]["ssim_replica"] is None
    assert by["s3"]["n_replica_calls"] == 0 and by["s3"]["ssim_rank"] == 1
    assert set(tables.combined_ranking_columns(["rmse", "mae", "ssim"])) >= set(rows[0])


def test_combined_ranking_ties_by_id_and_unrated():
    closest = {"b": "t1", "a": "t2"}
    rows = tables.combined_ranking({"rmse": _ranking(closest, {"a": 0.1, "b": 0.2}),
                                    "mae": _ranking(closest, {"a": 0.2, "b": 0.1})})
    assert [r["synthetic_id"] for r in rows] == ["a", "b"] and rows[0]["mean_rank"] == rows[1]["mean_rank"] == 1.5
    assert rows[0]["n_replica_calls"] is None and rows[0]["rmse_replica"] is None
    # a threshold equal to the score counts as a replica (score <= threshold)
    assert tables.combined_ranking({"rmse": _ranking(closest, {"a": 0.1, "b": 0.2})},
                                   {"rmse": 0.1})[0]["n_replica_calls"] == 1


# ---- tuned thresholds and the filter ---------------------------------------------------

EVALUATION = {"ratings": "r.tsv", "measures": {
    "rmse": {"threshold": 0.5, "balanced_accuracy": 1.0, "sensitivity": 1.0, "specificity": 1.0, "auc": 1.0,
             "n_synthetic": 4, "n_replicas": 2, "ci": {"threshold": [0.4, 0.6]}},
    "ssim": {"threshold": 0.3, "balanced_accuracy": 0.75, "sensitivity": 0.5, "specificity": 1.0, "auc": 0.8,
             "n_synthetic": 4, "n_replicas": 2},
    "dice_binary": {"threshold": None, "balanced_accuracy": None, "n_synthetic": 4, "n_replicas": 0},
}}


def test_tuned_thresholds_record_score_kind_and_n(tmp_path):
    t = tables.tuned_thresholds("rated", EVALUATION, ["rmse", "ssim", "dice_binary"], {"rmse": 4, "ssim": 4})
    assert t["dataset"] == "rated" and t["ratings"] == "r.tsv"
    r = t["measures"]["rmse"]
    assert (r["threshold"], r["score"], r["level"], r["n_used"], r["threshold_ci"]) == \
        (0.5, "distance ratio", "image", 4, [0.4, 0.6])
    assert t["measures"]["dice_binary"]["threshold"] is None
    assert t["measures"]["dice_binary"]["score"] == "absolute distance"
    write_json(tmp_path / "t.json", t)  # strict JSON
    assert json.loads((tmp_path / "t.json").read_text())["measures"]["ssim"]["threshold"] == 0.3
    with pytest.raises(ReviewError, match="dataset rated: evaluation has no measure 'mae'"):
        tables.tuned_thresholds("rated", EVALUATION, ["mae"])
    assert tables.thresholds_from_evaluation({"measures": {"rmse": {"threshold": math.nan}}}, ["rmse"]) == \
        {"rmse": None}


def _target_rankings():
    closest = {"x1": "t1", "x2": "t2", "x3": "t3", "x4": "t4"}
    return {"rmse": _ranking(closest, {"x1": 0.2, "x2": 0.5, "x3": 0.7, "x4": 0.9}),
            "ssim": _ranking(closest, {"x1": 0.6, "x2": 0.6, "x3": 0.25, "x4": 0.8})}


def test_filter_rejects_when_any_measure_calls_a_replica():
    tuned = tables.tuned_thresholds("rated", EVALUATION, ["rmse", "ssim"], {"rmse": 4, "ssim": 4})
    kept, rejected, summary = tables.filter_synthetic("new", _target_rankings(), tuned, ["rmse", "ssim"])
    # rmse <= 0.5: x1, x2 (0.5 itself counts); ssim <= 0.3: x3
    assert [(r["synthetic_id"], r["rejected_by"]) for r in rejected] == [("x1", "rmse"), ("x2", "rmse"),
                                                                          ("x3", "ssim")]
    assert [r["synthetic_id"] for r in kept] == ["x4"] and kept[0]["rejected_by"] == ""
    assert rejected[0]["rmse_threshold"] == 0.5 and rejected[0]["rmse_closest_training_id"] == "t1"
    assert summary["n_kept"] == 1 and summary["n_rejected"] == 3 and summary["thresholds_from"] == "rated"
    assert summary["rejected_by_measure"] == {"rmse": 2, "ssim": 1} and summary["warnings"] == []
    assert set(rejected[0]) == set(tables.filter_columns(["rmse", "ssim"]))
    # one measure only: x3 is kept
    kept, rejected, _ = tables.filter_synthetic("new", _target_rankings(), tuned, ["rmse"])
    assert [r["synthetic_id"] for r in kept] == ["x3", "x4"]


def test_filter_warns_when_the_ratio_n_differs():
    tuned = tables.tuned_thresholds("rated", EVALUATION, ["rmse"], {"rmse": 10})
    _, _, summary = tables.filter_synthetic("new", _target_rankings(), tuned, ["rmse"])
    assert "n=[4] here but n=10 in rated" in summary["warnings"][0]


def test_filter_refuses_without_usable_thresholds():
    tuned = tables.tuned_thresholds("rated", EVALUATION, ["rmse", "dice_binary"])
    with pytest.raises(FilterError, match="dataset new: cannot filter with ssim: it was not evaluated there"):
        tables.filter_synthetic("new", _target_rankings(), tuned, ["rmse", "ssim"])
    with pytest.raises(FilterError, match="dataset new: cannot filter with dice_binary: it has no optimal threshold"):
        tables.filter_synthetic("new", _target_rankings(), tuned, ["dice_binary"])
    with pytest.raises(FilterError, match="dataset new: relict.review.filter_measures is empty"):
        tables.filter_synthetic("new", _target_rankings(), tuned, [])
    bad = json.loads(json.dumps(tuned))
    bad["measures"]["rmse"]["score"] = "absolute distance"
    with pytest.raises(FilterError, match="threshold in rated is for a absolute distance"):
        tables.filter_synthetic("new", _target_rankings(), bad, ["rmse"])
    with pytest.raises(FilterError, match="dataset new: no ranking of rmse"):
        tables.filter_synthetic("new", {"ssim": _target_rankings()["ssim"]}, tuned, ["rmse"])


def test_check_filter_source():
    tables.check_filter_source("new", "rated", ["new", "rated"], ["rated"])
    with pytest.raises(FilterError, match="dataset new: filter_with: 'plain' has no rating"):
        tables.check_filter_source("new", "plain", ["new", "plain"], [])
    with pytest.raises(FilterError, match="dataset new: filter_with: 'nope' is not a dataset"):
        tables.check_filter_source("new", "nope", ["new"], [])
    with pytest.raises(FilterError, match="dataset new: filter_with names the dataset itself"):
        tables.check_filter_source("new", "new", ["new"], ["new"])


# ---- rating import ------------------------------------------------------------------

A = [4, 4, 3, 3, 2, 1, 4, 2, 3, 1]
B = [4, 3, 3, 2, 2, 1, 4, 3, 3, 2]


def _two_rater_file(tmp_path):
    p = tmp_path / "ratings.tsv"
    lines = ["synthetic_id\trater\tscore"]
    lines += [f"s{i + 1:02d}\talice\t{a}" for i, a in enumerate(A)]
    lines += [f"s{i + 1:02d}\tbob\t{b}" for i, b in enumerate(B)]
    p.write_text("\n".join(lines) + "\n")
    return p


def test_rating_import_two_raters_known_kappa(tmp_path):
    ids = [f"s{i:02d}" for i in range(1, 11)]
    by_rater = read_ratings_by_rater(_two_rater_file(tmp_path), ids)
    summary, rows = tables.rating_agreement(by_rater, 3)
    # decisions (score >= 3): alice 1111001010, bob 1110001110 -> agree on 8 of 10 (s04, s08 differ);
    # each calls 6 replicas: chance agreement 0.6*0.6 + 0.4*0.4 = 0.52, kappa = (0.8 - 0.52) / 0.48 = 7/12
    assert summary["n"] == 10 and summary["percent_agreement"] == pytest.approx(80.0)
    assert summary["kappa_decision"] == pytest.approx(7 / 12)
    # Likert: 6 of 10 equal; marginals alice {4:3, 3:3, 2:2, 1:2}, bob {4:2, 3:4, 2:3, 1:1}
    # chance (3*2 + 3*4 + 2*3 + 2*1) / 100 = 0.26, kappa = (0.6 - 0.26) / 0.74 = 17/37
    assert summary["kappa_likert"] == pytest.approx(17 / 37)
    assert summary["compared"] == ["alice", "bob"] and summary["note"] is None
    assert summary["per_rater"]["alice"] == {"n_rated": 10, "n_replicas": 6, "median_score": 3.0}
    assert summary["per_rater"]["bob"]["median_score"] == 3.0
    assert rows == [{"synthetic_id": "s04", "rater_1": "alice", "score_1": 3, "rater_2": "bob", "score_2": 2,
                     "mean_score": 2.5},
                    {"synthetic_id": "s08", "rater_1": "alice", "score_1": 2, "rater_2": "bob", "score_2": 3,
                     "mean_score": 2.5}]
    assert summary["n_disagreements"] == 2


def test_rating_import_single_rater_gives_nulls_with_a_note(tmp_path):
    p = tmp_path / "ref.tsv"
    p.write_text("synthetic_id\trater\tscore\ns1\treference\t4\ns2\treference\t1\n")
    summary, rows = tables.rating_agreement(read_ratings_by_rater(p, ["s1", "s2"]), 3)
    assert summary["percent_agreement"] is None and summary["kappa_decision"] is None
    assert summary["kappa_likert"] is None and rows == []
    assert "only 1 rater (reference)" in summary["note"]
    assert summary["per_rater"]["reference"]["n_replicas"] == 1
    out = tmp_path / "a.json"
    write_json(out, summary)
    assert json.loads(out.read_text())["kappa_decision"] is None


def test_rating_import_three_raters_reports_every_pair():
    by = {"a": {"s1": 4, "s2": 1}, "b": {"s1": 4, "s2": 1}, "c": {"s1": 1, "s2": 1}}
    summary, rows = tables.rating_agreement(by, 3)
    assert summary["compared"] == ["a", "b"] and summary["percent_agreement"] == 100.0 and rows == []
    pairs = {tuple(p["raters"]): p["percent_agreement"] for p in summary["pairs"]}
    assert pairs == {("a", "b"): 100.0, ("a", "c"): 50.0, ("b", "c"): 50.0}


# ---- small helpers -----------------------------------------------------------------

def test_paths_by_id_html_and_ranking_reader(tmp_path):
    assert tables.paths_by_id(["r/images/p1_bl.nii.gz", "x/s.2.nii"]) == {"p1_bl": "r/images/p1_bl.nii.gz",
                                                                         "s.2": "x/s.2.nii"}
    with pytest.raises(ReviewError, match="two volumes with id 'a'"):
        tables.paths_by_id(["x/a.nii.gz", "y/a.nii.gz"])
    page = tables.html_page("T <1>", [tables.html_table([{"a": 0.123456, "b": None, "c": "<x>"}], ["a", "b", "c"])])
    assert "0.1235" in page and "&ndash;" in page and "&lt;x&gt;" in page and "T &lt;1&gt;" in page
    assert "Images are mostly identical." in tables.likert_html()
    p = tmp_path / "ranking_rmse.tsv"
    p.write_text("synthetic_id\tclosest_training_id\tdistance\tmean_n_closest\tratio\tscore\tn_used\trank\n"
                 "s1\tt1\t0.1\t0.2\t0.5\t0.5\t4\t1\n")
    r = read_ranking(p)[0]
    assert r["score"] == 0.5 and r["rank"] == 1 and r["n_used"] == 4
    assert r["fpr"] is None and r["calibrated_replica"] is None  # written before calibration
    assert read_tsv(p)[0]["rank"] == "1"
    q = tmp_path / "bad.tsv"
    q.write_text("synthetic_id\tx\ns1\t1\n")
    with pytest.raises(ValueError, match="bad.tsv: not a ranking table"):
        read_ranking(q)


# ---- the verdict --------------------------------------------------------------------

def test_verdict_repeats_the_input_warnings_of_its_dataset_only(tmp_path):
    """An empty sample can be the "most likely replica" of a constant training scan; the verdict
    says what init warned of, read from the workspace's data/input_warnings.tsv, and nothing when
    that file is absent (the demo, a params.yaml run without init)."""
    from synthaudit.io import write_tsv
    from synthaudit.relict.ranking import write_ranking
    from synthaudit.review.verdict import dataset_verdict, verdict_lines

    rows = _ranking({"gen_zero": "pat0_s0", "gen_a": "pat1_s0"})
    for r in rows:
        r.update(distance=r["score"], mean_n_closest=1.0)
    write_ranking(tmp_path / "results/relict/audit/ranking_mae.tsv", rows)
    plain = verdict_lines(dataset_verdict(tmp_path, "audit", ["mae"]))
    assert not any("warning" in line for line in plain)
    warned = [{"dataset": "audit", "id": "pat0_s0", "role": "train", "file": "/in/pat0_s0.nii.gz",
               "warning": "constant volume: every voxel is 2"},
              {"dataset": "other", "id": "x", "role": "synthetic", "file": "/in/x.nii.gz", "warning": "elsewhere"}]
    warned += [{"dataset": "audit", "id": f"gen_{k}", "role": "synthetic", "file": f"/in/gen_{k}.nii.gz",
                "warning": "empty volume: every voxel is 0"} for k in range(9)]
    write_tsv(tmp_path / "data/input_warnings.tsv", warned, ["dataset", "id", "role", "file", "warning"])
    lines = verdict_lines(dataset_verdict(tmp_path, "audit", ["mae"]))
    assert lines[:len(plain)] == plain  # the answer first, unchanged
    assert lines[len(plain):] == [
        "  10 input volume(s) accepted with a warning (data/input_warnings.tsv, from synthaudit init):",
        "    pat0_s0 (train): constant volume: every voxel is 2"] + [
        f"    gen_{k} (synthetic): empty volume: every voxel is 0" for k in range(7)] + ["    ... and 2 more"]


def test_verdict_shows_the_combined_rules_heldout_false_positives(tmp_path):
    """The combined calibrated call's own false positives, the held-out scans judged by the same
    rule each without its patient, sit beside its calls (copies.json's combined_heldout_called);
    a copies.json written before the count existed prints no such line."""
    from synthaudit.io import write_json
    from synthaudit.relict.ranking import write_ranking
    from synthaudit.review.verdict import dataset_verdict, verdict_lines

    rows = _ranking({"gen_a": "pat1_s0", "gen_b": "pat0_s0"})
    for r in rows:
        r.update(distance=r["score"], mean_n_closest=1.0)
    write_ranking(tmp_path / "results/relict/audit/ranking_mae.tsv", rows)
    head = {"n_copies": 1, "percent_synthetic_copies": 50.0, "n_patients_copied": 1, "n_training_patients": 2}
    copies = {"rate": 0.05, "n_heldout": 40, "combined": head, "measures": {"mae": head}}
    write_json(tmp_path / "results/relict/audit/copies.json", copies)
    old = verdict_lines(dataset_verdict(tmp_path, "audit", ["mae"]))
    assert not any("held-out scans called by the same rule" in line for line in old)
    write_json(tmp_path / "results/relict/audit/copies.json", {**copies, "combined_heldout_called": 3})
    lines = verdict_lines(dataset_verdict(tmp_path, "audit", ["mae"]))
    assert ("    held-out scans called by the same rule, each judged without its patient: 3 of 40 (expected about 2.0)"
            in lines)


def test_the_verdict_reconciles_called_copies_with_model_level_measures_that_miss_them(tmp_path):
    """Issue 63: where the calibrated calls find copies and authenticity or C_T does not, the verdict says
    both and why, in words (C_T underpowered at this size; authenticity flags only some of them)."""
    from synthaudit.review.verdict import reconcile_lines

    c_t = {"value": -1.25, "copy_z": 2.0, "min_power": 0.8,
           "power": {"copy_share": 0.2, "probability": 0.01, "n_heldout": 20, "n_synthetic": 50}}
    v = {"n_synthetic": 50, "copied_patients": [("p1", ["g1", "g2"]), ("p2", ["g3"])], "fidelity": {"c_t": c_t},
         "authentic_of": {"g1": False, "g2": True, "g3": True, "g4": True}}
    lines = reconcile_lines(v)
    assert lines[0].startswith("    authenticity flags 1 of the 3 called copies: the rest lie farther")
    assert lines[1] == ("    C_T does not see the 3 called copies (6% of the samples): at this size it cannot: it "
                        "detects 20% copying with probability 0.01; the calibrated calls judge each volume against "
                        "the held-out scans")
    strong = {**c_t, "power": {**c_t["power"], "probability": 0.95}}
    assert "moved that mean less than -2" in reconcile_lines({**v, "fidelity": {"c_t": strong}})[1]
    # C_T sees copying, authenticity flags every call: nothing to reconcile; no calls: nothing either
    seen = {**v, "fidelity": {"c_t": {**c_t, "value": -3.0}}, "authentic_of": {"g1": False, "g2": False, "g3": False}}
    assert reconcile_lines(seen) == []
    assert reconcile_lines({**v, "copied_patients": []}) == []

"""docs/reproducibility.md's measured tables are the committed benchmarks' JSON, not typed in."""

from __future__ import annotations

from synthaudit_bench import reproducibility_tables as rt


def test_the_pages_tables_equal_the_committed_benchmark_json():
    page = (rt.ROOT / rt.TARGET).read_text(encoding="utf-8")
    assert rt.replace(page, rt.tables()) == page, (
        f"{rt.TARGET}'s tables differ from {rt.COST} / {rt.SPREAD}: run `PYTHONPATH=bench python -m "
        "synthaudit_bench.reproducibility_tables --write`")


def test_the_cost_table_names_every_rule_and_the_total():
    cost = {"rules": {"embed": {"portable_s": 30.0, "native_s": 20.0, "ratio": 1.5}},
            "total": {"portable_s": 100.0, "native_s": 80.0, "ratio": 1.25},
            "wall": {"portable_s": 600.0, "native_s": 500.0, "ratio": 1.2}}
    table = rt.cost_table(cost)
    assert "| `embed` | 30.0 | 20.0 | 1.50 |" in table
    assert "| every job | 100 | 80 | 1.25 |" in table and "| `make demo`, wall | 600 | 500 | 1.20 |" in table


def test_the_spread_table_lists_the_headline_metrics_that_moved():
    spread = {"seeds": 5, "estimates": {"unet": {"param": "datasets.ncct_demo.segmentation.unet.seed", "metrics": {
        "relict.json": {"ncct_demo.dice_binary.auc": {"demo": 0.9, "mean": 0.88, "sd": 0.02, "min": 0.85,
                                                      "max": 0.91, "n": 5},
                        "ncct_demo.dice_binary.threshold": {"demo": 0.5, "mean": 0.5, "sd": 0.1, "min": 0.4,
                                                            "max": 0.6, "n": 5}}}}}}
    table = rt.spread_table(spread)
    assert "| U-Net labels (`datasets.ncct_demo.segmentation.unet.seed`) | relict.json `ncct_demo.dice_binary.auc` " \
           "| 0.9 | 0.88 | 0.02 | 0.85 – 0.91 |" in table
    assert "threshold" not in table  # not a headline metric


def test_the_ncct_cost_table_gives_each_measure_per_pair_in_both_modes():
    cost = {"scale": "ncct_cost", "threads": 2, "repeats": 2,
            "cohort": {"n_synthetic": 50, "n_training": 100, "shape": [182, 218, 182]},
            "measures": {"ssim": {"portable_ms_per_pair": 8.5, "native_ms_per_pair": 6.9, "ratio": 1.23}}}
    table = rt.ncct_cost_table(cost)
    assert "50 synthetic x 100 training volumes of 182 x 218 x 182" in table and "`--scale ncct_cost`" in table
    assert "| ssim | 8.50 | 6.90 | 1.23 |" in table

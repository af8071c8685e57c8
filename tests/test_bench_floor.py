"""The SSIM floor of the benchmark (synthaudit_bench.floor): counts and the bound."""

import pytest

from synthaudit_bench.floor import ssim_floor, ssim_pair_cost


def test_counts_of_the_smallest_volume():
    # an 11^3 volume has one interior voxel: the product 11^3 multiplies; the second axis
    # 11 planes x 11 filtered values (22 flops each); the last axis 11 x (11 - 10); the
    # first axis 1 x (11 - 10); the SSIM terms 14; three interior maps read per side
    cost = ssim_pair_cost((11, 11, 11))
    assert cost["flops_by_pass"] == {"product": 1331, "second_axis": 121 * 22, "last_axis": 11 * 22,
                                     "first_axis": 22, "terms": 14}
    assert cost["flops"] == 1331 + 121 * 22 + 11 * 22 + 22 + 14
    assert cost["bytes"] == pytest.approx(4 * (11 ** 3 + 3) * 1.25)


def test_relict_ncct_pair_is_about_half_a_gigaflop():
    cost = ssim_pair_cost((182, 218, 182))
    assert 5.0e8 < cost["flops"] < 5.5e8
    assert 1.2e8 < cost["bytes"] < 1.4e8


def test_floor_is_the_slower_of_compute_and_memory():
    rates = {"threads": 2, "gemm_gflops": 100.0, "copy_gb_s": 10.0}
    f = ssim_floor((182, 218, 182), threads=2, measured_s_per_pair=0.024, rates=rates)
    assert f["bound"] == "memory" and f["floor_s_per_pair"] == f["memory_floor_s_per_pair"]
    assert f["memory_floor_s_per_pair"] == pytest.approx(f["bytes_per_pair"] / 1e10, rel=1e-6)
    assert f["times_floor"] == pytest.approx(0.024 / f["floor_s_per_pair"], abs=0.01)
    fast_memory = ssim_floor((182, 218, 182), threads=2, rates={**rates, "copy_gb_s": 1000.0})
    assert fast_memory["bound"] == "compute"

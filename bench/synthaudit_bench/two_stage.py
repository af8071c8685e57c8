"""Benchmark of the two-stage search (bench.two_stage_search) against the exact all-pairs matrix.

Stage 1 ranks training volumes for each synthetic volume by block-averaged volumes
(a downsampled image level) with an IVF index; stage 2 runs the workflow's exact
image measure on the top-K candidates only. The engine's full matrix of the same
measure (already computed by the benchmark) says how often the exact top-n is
recovered; the time saved is the full matrix's wall time against the whole two-stage
run (downsampling every volume, building the index, searching, exact stage).
"""

from __future__ import annotations

import time

import numpy as np

from .cohort import Cohort


def block_average(volume: np.ndarray, factor: int) -> np.ndarray:
    """Mean over ``factor``^3 blocks (trailing voxels that do not fill a block are dropped)."""
    shape = [n // factor for n in volume.shape]
    crop = volume[: shape[0] * factor, : shape[1] * factor, : shape[2] * factor].astype(np.float32)
    return crop.reshape(shape[0], factor, shape[1], factor, shape[2], factor).mean(axis=(1, 3, 5))


def run_two_stage(cohort: Cohort, config: dict, exact_values: np.ndarray, full_wall_s: float | None,
                  threads: int, device: str) -> dict:
    """Two-stage top-n for every synthetic volume; recall of the exact top-n and timings."""
    import torch

    from synthaudit.relict.image_measures import all_pairs_image_measures
    from synthaudit_bench.two_stage_search import recall_of_top_n, two_stage_search

    torch.set_num_threads(threads)
    measure, factor = config["measure"], config["downsample"]
    largest = measure == "ssim"
    start = time.perf_counter()
    syn_reader, train_reader = cohort.reader("synthetic_images"), cohort.reader("training_images")
    synthetic = syn_reader.read(0, len(syn_reader)).astype(np.float32)
    train_small = np.stack([block_average(train_reader.read(t), factor).ravel() for t in range(len(train_reader))])
    syn_small = np.stack([block_average(v, factor).ravel() for v in synthetic])
    downsample_s = time.perf_counter() - start

    def exact(query_index: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        out = np.empty(candidates.shape)
        for row, (q, cand) in enumerate(zip(query_index, candidates)):
            volumes = (train_reader.read(int(c)) for c in cand)
            out[row] = all_pairs_image_measures(synthetic[q:q + 1], volumes, [measure], data_range=cohort.data_range,
                                                threads=threads, device=device, n_training=len(cand))[measure][0]
        return out

    result = two_stage_search(syn_small, train_small, exact, k_candidates=config["k_candidates"], n=config["n"],
                              n_lists=config["n_lists"], n_probe=config["n_probe"], seed=0, device=device,
                              largest=largest)
    total = time.perf_counter() - start
    order = np.argsort(-exact_values if largest else exact_values, axis=1, kind="stable")[:, : config["n"]]
    recall = recall_of_top_n(order, result.indices)
    rows = np.arange(len(order))[:, None]
    value_diff = np.abs(result.values - exact_values[rows, result.indices]) / np.maximum(
        np.abs(exact_values[rows, result.indices]), 1e-12)
    return {
        **config, "stage1_vectors": f"block average {factor}^3 ({train_small.shape[1]} values per volume)",
        "n_lists_used": result.n_lists, "n_probe_used": result.n_probe,
        "recall_top_n": float(recall.recall), "top1_recovered": float(recall.top1_recovered),
        "exact_pairs": int(result.candidate_indices.size), "all_pairs": int(exact_values.size),
        "max_rel_diff_of_returned_values": float(value_diff.max()),
        "downsample_s": downsample_s, "build_s": result.build_seconds, "stage1_s": result.stage1_seconds,
        "stage2_s": result.stage2_seconds, "total_s": total, "full_all_pairs_wall_s": full_wall_s,
        "time_saved_fraction": None if not full_wall_s else 1.0 - total / full_wall_s,
    }

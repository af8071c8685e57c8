"""The local level's two figures: the most suspicious volumes, and the positive controls.

Why here: both read a :class:`.local_audit.LocalResult` and nothing else, so a benchmark or a
test can draw what the workflow draws.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..io import atomic_path
from .local_audit import Cohort, LocalResult


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_row(axes, result: LocalResult, vol, vol_title, t, t_title, b, zrow, vrow, caption, truth=None):
    """One volume's block beside the matching training slice and the block-ratio map (axial slice
    through the block's centre); ``truth``: a pasted cube's voxel ranges, drawn in yellow."""
    from matplotlib.patches import Rectangle

    grid = result.grid
    (x0, x1), (y0, y1), (z0, z1) = grid.block_ranges(b)
    zc = (z0 + z1) // 2
    lo_, hi_ = np.percentile(np.concatenate([vol[..., zc].ravel(), t[..., zc].ravel()]), [1, 99])
    for col, (v, title) in enumerate(((vol, vol_title), (t, t_title))):
        ax = axes[col]
        ax.imshow(v[..., zc].T, cmap="gray", origin="lower", vmin=lo_, vmax=hi_)
        ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, ec="red", lw=1.5))
        if truth is not None and col == 0:
            (tx0, tx1), (ty0, ty1) = truth[:2]
            ax.add_patch(Rectangle((tx0 - 0.5, ty0 - 0.5), tx1 - tx0, ty1 - ty0, fill=False, ec="yellow", lw=1.2,
                                   ls="--"))
        ax.set_title(title.replace("{z}", str(zc)), fontsize=8)
        ax.axis("off")
    # block map: each voxel of the slice shows the lowest relative ratio of the blocks holding it
    heat = np.full(grid.shape[:2], np.nan)
    for j, bb in enumerate(result.kept):
        (a0, a1), (b0, b1), (c0, c1) = grid.block_ranges(int(bb))
        if c0 <= zc < c1 and np.isfinite(zrow[j]) and vrow[j]:
            heat[a0:a1, b0:b1] = np.fmin(heat[a0:a1, b0:b1], zrow[j])
    ax = axes[2]
    im = ax.imshow(heat.T, origin="lower", cmap="magma", vmin=0, vmax=1.2)
    ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, ec="cyan", lw=1.5))
    ax.set_title(caption, fontsize=8)
    ax.axis("off")
    ax.figure.colorbar(im, ax=ax, fraction=0.046)


def copies_figure(result: LocalResult, cohort: Cohort, dataset: str, path: str,
                  load_training: Callable[[int], np.ndarray]) -> None:
    """The most suspicious volumes, the block's slice beside the matching training slice."""
    plt = _pyplot()
    score, closest, n_syn = result.score, result.closest, len(cohort.synthetic_ids)
    show = [i for i in result.order[: min(3, n_syn)] if np.isfinite(score[i])]
    if not show:
        fig, ax = plt.subplots(figsize=(6, 2))
        ax.text(0.5, 0.5, "no block could be tested (see the job's log)", ha="center", va="center")
        ax.axis("off")
    else:
        fig, axes = plt.subplots(len(show), 3, figsize=(10, 3.3 * len(show)), squeeze=False)
        for row, i in enumerate(show):
            j = int(closest[i])
            draw_row(axes[row], result, result.queries_raw[i], f"{cohort.synthetic_ids[i]} (synthetic), slice z = {{z}}",
                     np.asarray(load_training(j), np.float32),
                     f"{cohort.training_ids[j]} (training, {cohort.training_patients[j]})",
                     int(result.kept[result.block[i]]), result.zmaps[i], result.valid[i],
                     f"block ratio / held-out median (score {score[i]:.3f}, rate {result.fpr[i]:.3f}"
                     f"{', called' if result.called[i] else ''})")
        fig.suptitle(f"{dataset}: most likely local copies (the axial slice through each one's block)", fontsize=10)
        fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)


def controls_figure(result: LocalResult, cohort: Cohort, dataset: str, path: str,
                    load_training: Callable[[int], np.ndarray], margin_mm: float) -> None:
    """Fraction of the positive controls called per cube side: the local level beside the
    whole-volume RMSE ratio, both calibrated at the rate on the same held-out scans, and per
    distinctiveness tercile; below, the smallest called control whose block lies in its region."""
    plt = _pyplot()
    summary, ctl = result.summary, result.summary.get("controls")
    state, controls = result.control_state, result.control_list
    rate = summary["settings"]["rate"]
    example = None
    if ctl:
        hits = [k for k, r in enumerate(result.controls) if r["called"] and r["block_in_region"]]
        if hits:
            example = min(hits, key=lambda k: (controls[k].size_mm, state["score"][k]))
    if example is None:
        fig, ax = plt.subplots(figsize=(7, 3.6))
    else:
        fig = plt.figure(figsize=(10, 7.4))
        grid_spec = fig.add_gridspec(2, 3, height_ratios=[1, 1.15])
        ax = fig.add_subplot(grid_spec[0, :])
    if not ctl:
        ax.text(0.5, 0.5, "no positive controls (relict.local.controls.sizes_mm is empty,\n"
                "or no block could be tested)", ha="center", va="center")
        ax.axis("off")
    else:
        keys = list(ctl["by_size_mm"])
        x = np.arange(len(keys))
        bars = [("local level, all", [ctl["by_size_mm"][k]["sensitivity"] for k in keys], "tab:red"),
                ("local, most distinctive third", [ctl["by_size_mm"][k]["by_distinctiveness"]["high"] or 0
                                                   for k in keys], "salmon"),
                ("whole-volume RMSE ratio", [ctl["by_size_mm"][k]["whole_volume_rmse_sensitivity"] for k in keys],
                 "tab:gray")]
        width = 0.26
        for b, (label, values, colour) in enumerate(bars):
            pos = x + (b - 1) * width
            ax.bar(pos, values, width, label=label, color=colour)
            for xi, v in zip(pos, values):
                ax.text(xi, v + 0.02, f"{v:.2f}", ha="center", fontsize=7)
        ax.axhline(summary["heldout_false_positive_rate"] or 0, color="k", ls=":", lw=1,
                   label=f"held-out scans called (local, {summary['heldout_called_leave_patient_out']} of "
                         f"{summary['n_heldout']})")
        ax.set_xticks(x, [f"{k} mm\n(n = {ctl['by_size_mm'][k]['n']})" for k in keys])
        ax.set_ylim(0, 1.45)
        ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
        ax.set_ylabel(f"called at rate {rate:g}")
        ax.set_title(f"{dataset}: training regions pasted into held-out scans (noise SD {ctl['noise_sd']:.3g}; "
                     f"placed {', '.join(f'{v} {k}' for k, v in ctl['centred_on'].items())})", fontsize=9)
        ax.legend(fontsize=7, loc="upper center", ncol=2, frameon=False)
    if example is not None:
        k, c = example, controls[example]
        spacing = cohort.spacing_mm
        half = [(c.size_mm / 2.0 + margin_mm) / s_ for s_ in spacing]  # the pasted extent, blend included
        truth = [(int(round(cc - h)), int(round(cc + h))) for cc, h in zip(c.centre_vox, half)]
        j = int(state["closest"][k])
        draw_row([fig.add_subplot(grid_spec[1, col]) for col in range(3)], result, result.queries_raw[state["lo"] + k],
                 f"control: {cohort.heldout_ids[c.recipient]} + {c.size_mm:g} mm of {cohort.training_ids[c.donor]} "
                 f"(yellow: with its blend), z = {{z}}", np.asarray(load_training(j), np.float32),
                 f"{cohort.training_ids[j]} (training, {cohort.training_patients[j]})",
                 int(result.kept[state["block"][k]]), state["z"][k], result.valid[state["lo"] + k],
                 f"block ratio / held-out median (score {state['score'][k]:.3f}, "
                 f"rate {state['calls']['fpr'][k]:.3f}, called)", truth=truth)
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)

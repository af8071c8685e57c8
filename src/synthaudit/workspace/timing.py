"""What the heavy stages cost per unit on *this* machine and *this* grid, for init's plan (issue 47).

Why: init's estimate was constants measured at 1 mm on the development machine, scaled by voxels.
Neither the cost per voxel nor the machine carries over: the alignment's per-pair cost depends on
whether the grid has a coarse stage (a 1.5 mm head CT's 4,200 pairs were estimated at 0.1 h and took
about an hour), the encoder's does not scale with voxels alone, and another CPU's vector units change
every figure. So init times one small piece of each stage on the user's own samples (they are on the
grid the audit runs on, registered or not) with the job's thread count, and scales by the counts of
the plan: the image level per pair, the encoder per volume, the alignment per synthetic volume and per
aligned pair, FRD per volume, the local level per smoothed volume, block-compared pair and positive
control, the privacy filters per scan of a training step and of a validation batch. About 10 s on a small grid, a minute at 1.5 mm, on 2 cores; ``--no-timing`` keeps the constants (``estimate.constant_costs``).
The estimate is for this machine: on a cluster, run init where the jobs run, or read it as relative.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..devices import torch_threads

THREADS = 2  # the default profile's threads per heavy job (workflow/profiles/default)


@dataclass
class Costs:
    """Seconds of one unit of work per stage (one job of ``threads`` threads)."""

    image_pair_s: float  # MAE, RMSE and SSIM of one more (synthetic, training) pair in a job's batch
    image_train_s: float  # per training volume and image-level job, whatever the batch (its own filtering)
    read_s: float  # one volume file read (every image-level job reads each training volume)
    embedding_s: float  # one volume through the feature level's encoder
    embedding_start_s: float  # once per embedding job (its first call)
    align_pair_s: float  # one aligned candidate pair (the coarse-to-fine or full-resolution search)
    align_volume_s: float  # per aligned volume, whatever its candidates (pre-selection, closest-pair refinement)
    radiomics_s: float | None  # FRD's PyRadiomics features of one volume in one process (None: not timed)
    how: str  # "measured on this machine ..." or "constants ..."
    machine: str
    threads: int = THREADS
    # the local level (relict.local): one volume smoothed at smooth_mm, one more (query, training) pair's
    # block sums (one pass over the voxels, as the whole-volume RMSE of its controls), one positive
    # control placed and pasted (three box filters of the donor and a volume of fresh noise)
    smooth_s: float = 0.0
    local_pair_s: float = 0.0
    control_s: float = 0.0
    local_query_s: float = 0.0  # per query: its copy into the job's stack and its anatomy per block (volume_blocks)
    # the privacy filters (privacy.train): one training step (a batch of batch_pairs pairs, every distinct
    # scan of it embedded, the loss backpropagated, Adam's step) per distinct scan in the batch, and one
    # validation batch's forward pass per distinct scan, on the image space's input (image_downsample)
    privacy_scan_step_s: float = 0.0
    privacy_scan_val_s: float = 0.0
    # FRD within label classes (fidelity.frd_classes): one labelled volume's features within each class's
    # region, every class (None: not timed: no label maps, or scans not yet on the audit's grid)
    radiomics_classes_s: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def machine() -> str:
    """The CPU, as the estimate's reader needs to know whose it is."""
    from ..numerics import cpu_model

    return f"{cpu_model()}, {os.cpu_count()} CPUs"


def _seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def local_costs(vols: Sequence[np.ndarray], local_cfg: dict, spacing_mm: Sequence[float],
                threads: int = THREADS) -> tuple[float, float, float, float]:
    """The local level's unit costs on these volumes: (smoothing one volume, one more query's block sums
    against a training volume, one positive control placed and pasted, one query's copy into the stack
    and its anatomy per block), each the best of two, with the job's functions (relict.local) and threads."""
    from scipy.ndimage import gaussian_filter

    from ..relict import local
    from ..relict.kernels import kernel_threads
    from ..relict.local_audit import smoothing_sigma_vox

    spacing = [float(s) for s in spacing_mm]
    sigma = smoothing_sigma_vox(float(local_cfg["smooth_mm"]), spacing, float(local_cfg["smooth_min_vox"]))

    def best(fn) -> float:  # the best of two: timing noise is one-sided
        return min(_seconds(fn), _seconds(fn))

    smooth = best(lambda: gaussian_filter(vols[0], sigma).astype(np.float32))
    grid = local.BlockGrid.from_mm(vols[0].shape, spacing, float(local_cfg["block_mm"]), clamp=True)
    queries = np.ascontiguousarray(np.stack(vols[:5]), np.float32)
    training = np.ascontiguousarray(vols[4][None], np.float32)
    with kernel_threads(threads):
        local.cell_error_sums(queries[:1], training, grid.cell)  # numba compiles once per machine
        five = best(lambda: local.cell_error_sums(queries, training, grid.cell))
        one = best(lambda: local.cell_error_sums(queries[:1], training, grid.cell))
        # on small volumes or a busy machine the difference can vanish in the noise (CI once measured 0):
        # a tenth of the five queries' share, as the alignment's per-pair cost, keeps it a cost
        pair = max((five - one) / 4, 0.1 * five / 5)
    sizes = [float(x) for x in local_cfg["controls"]["sizes_mm"]] or [30.0]
    size = sorted(sizes)[len(sizes) // 2]  # the middle size: the box filters' cost grows with the cube
    donor, recipient = vols[1], vols[2]
    inside = np.abs(donor - np.median(donor)) > 0.05 * float(donor.max() - donor.min() or 1.0)
    rng = np.random.default_rng(0)

    def control():
        centre, _ = local.informative_centre(gaussian_filter(donor, sigma), inside, [size / s for s in spacing], rng)
        local.spike(recipient, donor, centre, size, spacing, float(local_cfg["controls"]["margin_mm"]), 1.0, rng)

    data_range = float(queries.max() - queries.min()) or 1.0

    def bookkeeping():  # the job stacks its queries (raw, then smoothed), then finds each one's anatomy
        stack = np.concatenate([queries, queries])
        local.volume_blocks(grid, stack[:len(queries)], float(np.median(queries[0])), data_range)

    return smooth, pair, best(control), best(bookkeeping) / len(queries)


def privacy_costs(vols: Sequence[np.ndarray], privacy_cfg: dict, threads: int = THREADS) -> tuple[float, float]:
    """The privacy filters' unit costs on these volumes: seconds per distinct scan of a training step
    and of a validation batch, each the best of two after a warm-up step, with the job's network (the
    image space's input, ``image_downsample``), objective, optimiser, thread count and deterministic
    mode (privacy.train).

    Why per distinct scan: a batch embeds each of its scans once (``_batch_loss``), so a step costs what
    its distinct scans cost; timed on a batch of the size the training uses (``patients_per_batch``
    patients of two scans, or ``batch_pairs`` pairs of two distinct scans)."""
    import torch

    from ..numerics_torch import adam
    from ..privacy.data import image_input
    from ..privacy.model import SiameseNetwork
    from ..privacy.train import _batch_loss, network_config
    from ..training import deterministic

    t = privacy_cfg["training"]
    batch = int(t["patients_per_batch"]) if t["batching"] == "patients" else int(t["batch_pairs"])
    n = 2 * batch  # a batch of patients with two scans each, or of pairs of two distinct scans
    x = np.stack([image_input(vols[k % len(vols)], int(privacy_cfg["image_downsample"])) for k in range(n)])
    pairs = np.arange(n).reshape(batch, 2)
    same = np.r_[np.ones(1), np.zeros(batch - 1)].astype(np.float32)
    ratio = float(privacy_cfg["training"]["negatives_per_positive"])
    dev = torch.device("cpu")
    config = network_config(privacy_cfg["network"], privacy_cfg["filter_objective"], x)
    with torch_threads(threads), deterministic(dev, 0):
        model = SiameseNetwork(config)
        opt = adam(model.parameters(), lr=float(privacy_cfg["training"]["learning_rate"]))

        def step():
            model.train()
            loss = _batch_loss(model, x, pairs, same, float(privacy_cfg["training"]["margin"]), dev, ratio)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        def validate():
            model.eval()
            with torch.no_grad():
                _batch_loss(model, x, pairs, same, float(privacy_cfg["training"]["margin"]), dev, ratio)

        step()  # warm-up: the first call's allocations and thread pool
        train_s = min(_seconds(step), _seconds(step))
        val_s = min(_seconds(validate), _seconds(validate))
    return train_s / n, val_s / n


def measure_costs(samples: Sequence[str | Path], features: dict, alignment: dict, spacing_mm: Sequence[float],
                  threads: int = THREADS, progress: Callable[[str], None] = print,
                  local_cfg: dict | None = None, privacy_cfg: dict | None = None,
                  labelled: tuple[str | Path, str | Path, int] | None = None) -> Costs:
    """Time each heavy stage on up to five of the user's samples (the audit's grid).

    - image level: MAE, RMSE and SSIM of one sample against 2 and 6 others and of five against 6 (the
      engine the jobs run, best of two), after a warm-up: the per-pair cost and the per-training-volume
      one; one file's read;
    - encoder: one volume through ``features``' extractor, after three calls on a 24^3 crop: loading
      it and what the first two calls cost above the third are the job's start-up;
    - alignment (``alignment``: relict.alignment): the first sample against 3 and then 6 others with
      the workflow's search (pre-selection, the coarse-to-fine or full-resolution search, the
      closest pairs' refinement); the difference is the per-pair cost, the rest the per-volume one;
    - FRD: one sample's PyRadiomics features (the rule's function, in this one process), and, with
      ``labelled`` (a scan on the audit's grid, its label map, the number of classes), that scan's
      features within each class's region (FRD within label classes);
    - the local level (``local_cfg``: relict.local; None: not timed): :func:`local_costs`;
    - the privacy filters' training (``privacy_cfg``: privacy; None: not timed): :func:`privacy_costs`.
    """
    from ..features import extractor_from_config
    from ..io import load_volume
    from ..relict import alignment as al
    from ..relict.image_measures import all_pairs_image_measures

    paths = list(samples)[:5]
    vols = [load_volume(p)[0] for p in paths]
    while len(vols) < 5:  # a set of 2-4 samples: repeat them (the cost is the same)
        vols.append(vols[len(vols) % len(paths)])
    affine = np.diag(list(map(float, spacing_mm)) + [1.0])
    data_range = float(max(v.max() for v in vols) - min(v.min() for v in vols)) or 1.0
    progress(f"timing the heavy stages on {len(paths)} of your samples ({' x '.join(map(str, vols[0].shape))}, "
             f"{threads} threads; --no-timing skips this) ...")
    t0 = time.perf_counter()
    load_volume(paths[-1])
    read = time.perf_counter() - t0
    with torch_threads(threads):
        def image(n_syn: int, n_train: int) -> float:
            start = time.perf_counter()
            all_pairs_image_measures(np.stack(vols[:n_syn]), np.stack([vols[3 + k % 2] for k in range(n_train)]),
                                     ["mae", "rmse", "ssim"], data_range=data_range, threads=threads, device="cpu")
            return time.perf_counter() - start

        image(1, 1)  # warm-up: numba compiles its kernels once per machine
        # the jobs hold every synthetic volume and stream the training ones: one more training volume costs
        # a (its own filtering, shared by the held volumes) + b per held volume; the call's set-up cancels.
        # The best of two runs each, and differences of 24 pairs (b) and 4 training volumes (a + b), so that
        # they stand above the timing noise
        def best(n_syn, n_train):
            return min(image(n_syn, n_train), image(n_syn, n_train))

        one_two, one_six, five_six = best(1, 2), best(1, 6), best(5, 6)
        image_pair = max((five_six - one_six) / (6 * 4), 0.0)
        image_train = max((one_six - one_two) / 4 - image_pair, 0.0)

        t0 = time.perf_counter()  # each embedding job loads the encoder once
        extractor = extractor_from_config(dict(features, device="cpu"))
        load = time.perf_counter() - t0
        crop = np.ascontiguousarray(vols[0][:24, :24, :24])
        calls = []
        for _ in range(3):  # the first calls' start-up (thread pool, lazy initialisation): once per job
            t0 = time.perf_counter()
            extractor.embed_many([crop])
            calls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        extractor.embed_many([vols[0]])
        embedding = time.perf_counter() - t0

    space = al.SearchSpace.from_params(alignment["search"])
    factor = al.refine_factor(alignment.get("coarse_mm"), spacing_mm)
    keys = [f"v{i}" for i in range(7)]  # the first against up to 6 others (the samples repeated)
    by_key = {key: vols[1 + (i - 1) % 4] if i else vols[0] for i, key in enumerate(keys)}

    def loaded(key):
        return by_key[key], affine

    def align(k: int) -> float:
        start = time.perf_counter()
        pre = al.preselect_factor(float(alignment["preselect_block_mm"]), vols[0].shape, spacing_mm, space, 1e9)
        cand, hyp, sp, background = al.preselect_volumes(keys[:1], keys[1:1 + k], loaded, space, k, pre,
                                                         n_hypotheses=int(alignment["hypotheses"]), workers=threads)
        al.align_candidates_ranked(keys[:1], keys[1:1 + k], loaded, cand, hyp, space, sp, workers=threads,
                                   factor=factor, background=background, keep=k)
        return time.perf_counter() - start

    from ..fidelity.radiomics import features_of
    from ..fidelity.texture_matrices import warm

    warm()  # numba's texture kernels compiled first (once per machine; the rule's jobs load them from its cache)
    t0 = time.perf_counter()  # FRD's PyRadiomics features of one volume (one process, as each of the rule's)
    features_of(paths[0])
    radiomics = time.perf_counter() - t0
    radiomics_classes = None
    if labelled is not None:
        from ..fidelity.radiomics import class_features_of

        t0 = time.perf_counter()
        class_features_of(*labelled)
        radiomics_classes = time.perf_counter() - t0

    align(1)  # numba's kernels compiled (cached once per machine), the rotation tables built
    # 3 and 6 candidates: the closest three pairs' joint refinement (refine_top) costs the same in both,
    # so the difference is 3 pairs' search
    three, six = min(align(3), align(3)), min(align(6), align(6))  # the best of two: timing noise is one-sided
    per_pair = max((six - three) / 3, 0.1 * six / 6)
    per_volume = max(three - 3 * per_pair, 0.0)
    smooth, local_pair, control, local_query = (local_costs(vols, local_cfg, spacing_mm, threads) if local_cfg
                                                else (0.0, 0.0, 0.0, 0.0))
    scan_step, scan_val = privacy_costs(vols, privacy_cfg, threads) if privacy_cfg else (0.0, 0.0)
    return Costs(image_pair_s=image_pair, image_train_s=image_train, read_s=read, embedding_s=embedding, embedding_start_s=load + max(calls[0] + calls[1] - 2 * calls[2], 0.0),
                 align_pair_s=per_pair, align_volume_s=per_volume, radiomics_s=radiomics,
                 how=f"measured on this machine by init on {len(paths)} of your samples", machine=machine(),
                 threads=threads, smooth_s=smooth, local_pair_s=local_pair, control_s=control,
                 local_query_s=local_query,
                 privacy_scan_step_s=scan_step, privacy_scan_val_s=scan_val, radiomics_classes_s=radiomics_classes)

"""What the 2.5D FD's slice features cost per volume on this machine's CPUs (fidelity.fd_2p5d):
RadImageNet's ResNet-50 layout with seeded random weights (the cost does not depend on the weights)
on every XY, YZ and ZX slice of a volume of each grid, the best of ``--repeats``.

Usage: python bench/fidelity/slices_cost.py [--threads 2] [--repeats 2] --out results/bench/slices_cost.json
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

# (shape, spacing mm): the demo's 3 mm head, the real-anatomy 1.5 mm head, RELICT's 1 mm grid
GRIDS = [((61, 73, 61), 3.0), ((121, 145, 121), 1.5), ((182, 218, 182), 1.0)]


def main(argv=None) -> int:
    import torch

    from synthaudit.fidelity.slices import _trunk, slice_features
    from synthaudit.io import write_json
    from synthaudit.numerics import cpu_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("results/bench/slices_cost.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = _trunk().eval()
    rng = np.random.default_rng(0)
    rows = []
    for shape, mm in GRIDS:
        v = rng.normal(size=shape).astype(np.float32)
        best = min(_timed(lambda: slice_features(net, v)) for _ in range(args.repeats))
        rows.append({"shape": list(shape), "spacing_mm": mm, "slices": int(sum(shape)), "seconds_per_volume": round(best, 2),
                     "ms_per_slice": round(1000 * best / sum(shape), 1)})
        print(rows[-1], flush=True)
    write_json(args.out, {"what": __doc__.splitlines()[0], "threads": args.threads, "repeats": args.repeats,
                          "cpu": cpu_model(), "machine": platform.machine(), "torch": torch.__version__, "grids": rows})
    return 0


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    raise SystemExit(main())

"""The pretrained CT encoder's CPU cost per volume, and which exact inference path is fastest (issue 47).

Why: the feature level (Astra's I3D ResNet-152 over every volume) was the largest part of a real audit
on CPUs: 770 s for 130 volumes of 85^3 at 1.5 mm. This bench times one volume per grid (85^3 and
121 x 145 x 121 at 1.5 mm, 182 x 218 x 182 at 1 mm) on the job's threads, for the extractor as the
workflow runs it and for variants of the same network, and reports each variant's largest relative
difference from the workflow's embedding (a variant is usable only where that stays below 1e-3):

- ``channels_last``: the activations in channels-last 3D layout (oneDNN's blocked kernels);
- ``stem_folded``: the stem's three input channels (the one CT channel repeated) summed into one;
- ``both``.

The network's floating-point operations per volume (torch's FLOP counter) and the rate the workflow's
path reaches say how far it is from the cores' peak.

    python bench/features/encoder_cost.py --out results/bench/encoder_cost.json [--threads 2] [--reps 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch

GRIDS = {"85^3 at 1.5 mm": (85, 85, 85), "121x145x121 at 1.5 mm": (121, 145, 121),
         "182x218x182 at 1 mm": (182, 218, 182)}


def folded_stem(model: torch.nn.Module) -> torch.nn.Module:
    """The network with its stem taking one channel: the sum of the three input channels' filters
    (the input repeats the CT channel three times, so the output is the same up to rounding)."""
    m = copy.deepcopy(model)
    old = m.conv1
    new = torch.nn.Conv3d(1, old.out_channels, old.kernel_size, old.stride, old.padding, bias=False)
    with torch.no_grad():
        new.weight.copy_(old.weight.sum(dim=1, keepdim=True))
    m.conv1 = new
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/encoder_cost.json"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--grids", default=",".join(GRIDS))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from synthaudit.features import extractor_from_config
    from synthaudit.workspace.timing import machine

    ex = extractor_from_config({"extractor": "astra_resnet152", "grid": 1, "smoothing_voxels": 0.0}, device="cpu")
    inner = getattr(ex, "inner", ex)
    base = inner.model
    variants = {"workflow": (base, False, False), "channels_last": (base, True, False),
                "stem_folded": (folded_stem(base), False, True), "both": (folded_stem(base), True, True)}
    out = {"machine": machine(), "threads": args.threads, "torch": torch.__version__, "grids": {}}
    rng = np.random.default_rng(0)
    for name in args.grids.split(","):
        shape = GRIDS[name]
        v = (rng.random(shape, np.float32) * 0.2 + np.linspace(0, 1, shape[0], dtype=np.float32)[:, None, None])
        x = inner.to_input(v[None])
        row, ref = {}, None
        for vname, (model, cl, fold) in variants.items():
            model = model.to(memory_format=torch.channels_last_3d) if cl else model
            inp = x[:, :1].contiguous() if fold else x.contiguous()
            if cl:
                inp = inp.contiguous(memory_format=torch.channels_last_3d)
            times = []
            with torch.inference_mode():
                model(inp)  # warm-up: oneDNN primitives for this shape
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    y = model(inp).mean(dim=(2, 3, 4))
                    times.append(time.perf_counter() - t0)
            y = y.float().numpy()
            if ref is None:
                ref = y
            row[vname] = {"seconds": round(min(times), 3),
                          "max_rel_diff": float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))}
            print(name, vname, row[vname], flush=True)
        from torch.utils.flop_counter import FlopCounterMode

        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            base(x.contiguous())
        gflop = counter.get_total_flops() / 1e9
        row["gflop"] = round(gflop, 1)
        row["workflow_gflop_per_s"] = round(gflop / row["workflow"]["seconds"], 1)
        print(name, f"{gflop:.1f} GFLOP, {row['workflow_gflop_per_s']} GFLOP/s", flush=True)
        out["grids"][name] = row
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The feature level's encoders' CPU cost per volume, and which exact inference path is fastest (issue 47).

Why: the feature level (Astra's I3D ResNet-152 over every volume) was the largest part of a real audit
on CPUs: 770 s for 130 volumes of 85^3 at 1.5 mm. This bench times one volume per grid (the demo's
61 x 73 x 61 at 3 mm, 85^3 and 121 x 145 x 121 at 1.5 mm, 182 x 218 x 182 at 1 mm) on the job's
threads, for the extractor as the workflow runs it and for variants of the same network, and reports
each variant's largest relative difference from the workflow's embedding (a variant is usable only
where that stays below 1e-3):

- ``torch_default``: every convolution as torch itself dispatches it (plain ``nn.Conv3d``): the
  workflow's path before ``features.conv.OneDnnConv3d``, which for a batch of one sends small maps to
  torch's unvectorised im2col convolution;
- ``torch_default_batch2``: the same in batches of two volumes (seconds per volume);
- ``batch2``: the workflow's path in batches of two (seconds per volume);
- ``channels_last``: the activations in channels-last 3D layout (oneDNN's blocked kernels);
- ``stem_folded``: the stem's three input channels (the one CT channel repeated) summed into one;
- ``both``: channels-last and the folded stem.

``--encoder medicalnet`` times MedicalNet's ResNet-50 (RELICT's encoder, the demo's; untrained, seed 0)
instead, on the paths that apply to it (its stem takes one channel already), into its own JSON and
table.

The network's floating-point operations per volume (torch's FLOP counter) and the rate the workflow's
path reaches say how far it is from the cores' peak.

    python bench/features/encoder_cost.py [--out results/bench/encoder_cost.json] [--threads 2] [--reps 2]
    python bench/features/encoder_cost.py --encoder medicalnet --threads 1 --grids "61x73x61 at 3 mm"
    python bench/features/encoder_cost.py doc [--write]     # docs/benchmarks_levels.md's tables from the JSONs
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import NamedTuple

import synthaudit  # noqa: F401  first: portable numerics before numpy and torch load
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's table from the JSON

PAGE = "docs/benchmarks_levels.md"


class Encoder(NamedTuple):
    """A network this bench times: its extractor configuration, its JSON, its docs table's markers, its paths."""

    config: dict
    result: str
    markers: tuple[str, str]
    variants: tuple[str, ...]


ENCODERS = {
    "astra": Encoder({"extractor": "astra_resnet152", "grid": 1, "smoothing_voxels": 0.0},
                     "results/bench/encoder_cost.json",
                     ("<!-- encoder_cost: bench/features/encoder_cost.py doc --write -->", "<!-- /encoder_cost -->"),
                     ("workflow", "torch_default", "batch2", "torch_default_batch2", "channels_last", "stem_folded",
                      "both")),
    "medicalnet": Encoder({"extractor": "medicalnet_resnet50", "seed": 0}, "results/bench/encoder_cost_medicalnet.json",
                          ("<!-- encoder_cost_medicalnet: bench/features/encoder_cost.py doc --write -->",
                           "<!-- /encoder_cost_medicalnet -->"),
                          ("workflow", "torch_default", "batch2", "torch_default_batch2", "channels_last")),
}
GRIDS = {"61x73x61 at 3 mm": (61, 73, 61), "85^3 at 1.5 mm": (85, 85, 85), "121x145x121 at 1.5 mm": (121, 145, 121),
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


def torch_default(model: torch.nn.Module) -> torch.nn.Module:
    """The network with torch's own dispatch for every convolution (the workflow's path before
    ``OneDnnConv3d``): the same weights, each convolution a plain ``nn.Conv3d``."""
    m = copy.deepcopy(model)
    for module in m.modules():
        if isinstance(module, torch.nn.Conv3d):
            module.__class__ = torch.nn.Conv3d
    return m


def markdown(res: dict) -> str:
    """Seconds per volume of each path, and each path's largest relative difference from the workflow's."""
    variants = ENCODERS[res.get("encoder", "astra")].variants
    lines = [f"{res['machine']}, {res['threads']} threads, torch {res['torch']}, numerics {res['numerics']}; "
             "seconds per volume (best of the runs), the largest difference from the workflow's embedding "
             "relative to its largest value in brackets:", "",
             "| grid | GFLOP | " + " | ".join(f"`{v}`" for v in variants) + " | speed-up |",
             "|---" * (len(variants) + 3) + "|"]
    for grid, row in res["grids"].items():
        cells = [f"{row[v]['seconds']:.2f}" + ("" if v == "workflow" else f" ({row[v]['max_rel_diff']:.0e})"
                                                  if row[v]["max_rel_diff"] else " (same bits)") for v in variants]
        lines.append(f"| {grid} | {row['gflop']:.0f} | " + " | ".join(cells)
                     + f" | {row['speedup_over_torch_default']:.2f}x |")
    return "\n".join(lines)


def doc(write: bool) -> int:
    rc = 0
    for enc in ENCODERS.values():
        rc = max(rc, doc_table.doc(PAGE, enc.result, enc.markers, markdown, write,
                                   "bench/features/encoder_cost.py doc --write"))
    return rc


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["doc"]:
        return doc("--write" in argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", choices=sorted(ENCODERS), default="astra")
    ap.add_argument("--out", type=Path, help="default: the encoder's JSON under results/bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--grids", default=",".join(GRIDS))
    args = ap.parse_args(argv)
    encoder = ENCODERS[args.encoder]
    args.out = args.out or ROOT / encoder.result
    torch.set_num_threads(args.threads)
    from synthaudit.features import extractor_from_config
    from synthaudit.workspace.timing import machine

    ex = extractor_from_config(encoder.config, device="cpu")
    inner = getattr(ex, "inner", ex)
    base = inner.model
    default = torch_default(base)
    # name: (network, channels-last, folded stem, volumes per forward pass)
    variants = {"workflow": (base, False, False, 1), "torch_default": (default, False, False, 1),
                "torch_default_batch2": (default, False, False, 2), "batch2": (base, False, False, 2),
                "channels_last": (base, True, False, 1)}
    if "stem_folded" in encoder.variants:  # a stem of three input channels (the CT channel repeated)
        variants.update(stem_folded=(folded_stem(base), False, True, 1), both=(folded_stem(base), True, True, 1))
    variants = {name: variants[name] for name in encoder.variants}
    from synthaudit.numerics import provenance

    out = {"encoder": args.encoder, "machine": machine(), "threads": args.threads, "torch": torch.__version__,
           **provenance(), "grids": {}}
    rng = np.random.default_rng(0)
    for name in args.grids.split(","):
        shape = GRIDS[name]
        v = (rng.random(shape, np.float32) * 0.2 + np.linspace(0, 1, shape[0], dtype=np.float32)[:, None, None])
        row, ref = {}, None
        for vname, (model, cl, fold, batch) in variants.items():
            x = inner.to_input(np.stack([v] * batch))
            # a copy: Module.to converts in place, which left the workflow's network channels-last for the next grids
            model = copy.deepcopy(model).to(memory_format=torch.channels_last_3d) if cl else model
            inp = x[:, :1].contiguous() if fold else x.contiguous()
            if cl:
                inp = inp.contiguous(memory_format=torch.channels_last_3d)
            times = []
            with torch.inference_mode():
                model(inp)  # warm-up: oneDNN primitives for this shape
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    y = model(inp).mean(dim=(2, 3, 4))
                    times.append((time.perf_counter() - t0) / batch)
            y = y[:1].float().numpy()
            if ref is None:
                ref = y
            row[vname] = {"seconds": round(min(times), 3),
                          "max_rel_diff": float(np.max(np.abs(y - ref)) / np.max(np.abs(ref))),
                          "bits_equal": bool(np.array_equal(y, ref))}
            print(name, vname, row[vname], flush=True)
        from torch.utils.flop_counter import FlopCounterMode

        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            default(x.contiguous())  # the counter sees aten's convolution, not oneDNN's op called directly
        gflop = counter.get_total_flops() / 1e9
        row["gflop"] = round(gflop, 1)
        row["workflow_gflop_per_s"] = round(gflop / row["workflow"]["seconds"], 1)
        row["speedup_over_torch_default"] = round(row["torch_default"]["seconds"] / row["workflow"]["seconds"], 2)
        print(name, f"{gflop:.1f} GFLOP, {row['workflow_gflop_per_s']} GFLOP/s", flush=True)
        out["grids"][name] = row
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

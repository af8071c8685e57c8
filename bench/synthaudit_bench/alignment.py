"""The alignment-aware distance ratio at RELICT's scale (``make bench``): the command line.

``--scale ncct`` runs the whole aligned ratio on the cached NCCT bench cohort (n = 50, timed
against twice the in-full SSIM time; :mod:`synthaudit_bench.alignment_scale` does the work).
The per-pair bench that was this module's default mode (``--spacing``, results/bench/alignment_*mm.json,
never committed) is gone: the NCCT runs give alignment's seconds per candidate pair at 1 mm
(``align_s_per_candidate_pair``), and bench/real_anatomy/alignment_coarse_check.py at 1.5 mm.

    python -m synthaudit_bench.alignment --scale ncct --out results/bench/alignment_ncct.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from synthaudit.io import write_json


def ssim_target_s(bench_file: Path, fallback: float = 1200.0) -> float:
    """Twice the measured in-full SSIM wall time at NCCT scale (issue 19's target), if there is one.

    The target is relative to the plain SSIM on the same machine; an extrapolated SSIM
    time (``ssim_training_fraction`` < 1) or no measurement falls back to twice SSIM's own
    10-minute target.
    """
    try:
        engine = json.loads(bench_file.read_text())["use_cases"]["ncct"]["measures"]["ssim"]["engine"]
    except (OSError, ValueError, KeyError, TypeError):
        return fallback
    if engine.get("extrapolated") or not engine.get("wall_s"):
        return fallback
    return 2.0 * float(engine["wall_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synthaudit_bench.alignment", description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml", help="relict.alignment comes from here")
    parser.add_argument("--out", default="results/bench/alignment_ncct.json")
    parser.add_argument("--scale", choices=["ncct"], default="ncct",
                        help="the aligned ratio at RELICT's scale (the one scale there is)")
    parser.add_argument("--n", type=int, default=50, help="the ratio's n closest (default: %(default)s)")
    parser.add_argument("--candidates", type=int, default=None, help="K (default: params.yaml's)")
    parser.add_argument("--per-kind", type=int, default=3,
                        help="augmented replicas per kind (default: %(default)s)")
    parser.add_argument("--exact-subset", type=int, default=5,
                        help="synthetic volumes with all n nearest aligned, the exact reference "
                             "(default: %(default)s)")
    parser.add_argument("--reference-k", type=int, default=None,
                        help="candidates aligned for the exact reference (default: max(n, 2 K))")
    parser.add_argument("--reference-pairs", type=int, default=10,
                        help="candidate pairs also aligned by the full-resolution reference "
                             "(default: %(default)s)")
    parser.add_argument("--preselect-downsample", type=int, default=None,
                        help="block-mean factor of the pre-selection (default: 4 mm blocks)")
    parser.add_argument("--keep", type=int, default=None,
                        help="rank the K candidates on the coarse block means and align only the best KEEP at "
                             "full resolution (default: params.yaml's relict.alignment.candidates when --candidates "
                             "exceeds it, else all K)")
    parser.add_argument("--exhaustive", default=None,
                        help="the recall bench's arrays (.npz, every training volume aligned): recall and "
                             "ratio error of the run against them")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--target-s", type=float, default=None,
                        help="wall-time target (default: twice the in-full SSIM wall time in "
                             "results/bench/ncct.json, else 1200 s, twice SSIM's 10-minute target)")
    args = parser.parse_args(argv)
    if args.target_s is None:
        args.target_s = ssim_target_s(Path(args.out).parent / "ncct.json")
    from synthaudit_bench.alignment_scale import run_ncct

    kw = {} if args.candidates is None else {"k": args.candidates}
    kw["keep"], kw["exhaustive"] = args.keep, args.exhaustive
    if args.preselect_downsample is not None:
        kw["preselect_factor"] = args.preselect_downsample
    result = run_ncct(args.params, n=args.n, n_per_kind=args.per_kind, exact_subset=args.exact_subset,
                      reference_pairs=args.reference_pairs, reference_k=args.reference_k,
                      threads=args.threads, device=args.device, target_s=args.target_s, **kw)
    out = Path(args.out)
    write_json(out, result)
    print(json.dumps(result, indent=2))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Numbers that do not depend on the CPU: the same bits on every x86-64 machine with AVX2.

Why: the libraries under synthaudit pick their kernels by the CPU they run on, and other
kernels round differently. Measured on this project's machines and under qemu's emulated
Intel Haswell and AMD Milan (docs/reproducibility.md):

* MKL (torch's matrix products and vector math) takes other code paths on Intel and AMD
  CPUs, even with ``MKL_CBWR=AVX2``; only its ``COMPATIBLE`` branch gives one result on both;
* MKL's vector ``sqrt`` (torch's CPU ``sqrt`` and ``x ** 0.5``, the default Adam step) is not
  IEEE-rounded and differs under another CPU in every branch; the IEEE square root
  (:func:`sqrt`, fused Adam, numpy) gives one answer everywhere;
* oneDNN (torch's 3D convolutions) and ATen run AVX-512 code where the CPU has it;
* numpy's AVX-512 ``exp``/``log`` and sort (the order of ties), OpenBLAS's kernels and numba's
  code generation follow the host; numba's fast-math turns float32 ``a / b`` into the CPU's
  ``rcpps`` estimate, which Intel, AMD and an emulator round differently.

Every trained estimate (U-Net labels, privacy filters, CVAE, the latent diffusion model)
and the cohort itself moved with them: a baseline made on one machine failed
``check_baseline`` on another in 170 values. In the **portable** mode (the default) every
library runs at one fixed level, chosen so that a CPU with AVX2 and FMA (every x86-64
server since 2013) runs it: the environment variables below, set in this process when
synthaudit is imported (and so inherited by every Snakemake job, local, SLURM or conda), and
the IEEE operations above where the library's own are not. With them, oneDNN at AVX2 gave
the same bits on the host and under both emulated CPUs, whose caches differ (L2 1 MB,
4 MB, 512 kB). ``SYNTHAUDIT_NUMERICS=native`` lifts the variables for speed; the metrics then
record ``native`` and the host's ISA. Thread counts stay each rule's ``threads`` (a reduction
split over other thread counts rounds differently): the profiles fix them.

The claim is tested (tests/test_numerics.py) by fingerprinting every kind of computation
(synthaudit.numerics_probe) with the host's dispatch capped lower, under ``qemu-x86_64 -cpu
Haswell-v4``, and against the fingerprints committed with the baseline.
"""

from __future__ import annotations

import os
import platform
import sys
from functools import lru_cache

ENV_VAR = "SYNTHAUDIT_NUMERICS"
MODES = ("portable", "native")
DEFAULT_MODE = "portable"

# The portable level: what each library may use. A CPU with AVX2 and FMA runs all of it.
PORTABLE_ISA = "avx2"
PORTABLE_ENV = {
    # ATen's own vectorised kernels (elementwise ops, reductions, fused Adam): AVX2 code
    "ATEN_CPU_CAPABILITY": "avx2",
    # oneDNN (3D convolutions): AVX2 kernels
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    # MKL (torch's BLAS, FFT, vector math): the one branch MKL documents as giving the same
    # results on Intel and AMD CPUs
    "MKL_CBWR": "COMPATIBLE",
    "MKL_DYNAMIC": "FALSE",
    "OMP_DYNAMIC": "FALSE",
    # numpy/scipy's OpenBLAS: Haswell's kernels (AVX2) whatever the CPU
    "OPENBLAS_CORETYPE": "Haswell",
    # numba's code generation: for Haswell (AVX2 + FMA), not the host. The features must be named
    # too (numba otherwise adds the host's, AVX-512 included); the two fast-sqrt tunings keep
    # LLVM's fast-math from replacing float32 square roots by the CPU's rsqrt estimate, which
    # Intel and AMD round differently
    "NUMBA_CPU_NAME": "haswell",
    "NUMBA_CPU_FEATURES": "+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+cx8,+f16c,+fma,+fxsr,+lzcnt,+mmx,+movbe,"
                          "+popcnt,+sahf,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+x87,+xsave,"
                          "+fast-scalar-fsqrt,+fast-vector-fsqrt",
    # numpy's dispatched kernels above AVX2 (AVX-512 exp/log/sort); the names of numpy >= 2.4
    # and of earlier releases (unknown names are ignored)
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR AVX512F AVX512CD AVX512_KNL AVX512_KNM "
                                "AVX512_SKX AVX512_CLX AVX512_CNL",
}
# numba's fast-math for the kernels: reassociation (vectorised sums) and FMA contraction, without
# "arcp" and "afn": with those LLVM computes float32 a / b and sqrt from the CPU's rcpps/rsqrtps
# estimates, which Intel, AMD and an emulator round differently (measured: SSIM's terms)
FASTMATH = {"nnan", "ninf", "nsz", "contract", "reassoc"}  # a set: numba takes no other kind
_LIBRARIES = ("numpy", "torch", "numba")  # read some of the variables when first imported
_REQUIRED_FLAGS = ("avx2", "fma")


class NumericsError(ValueError):
    """A bad ``SYNTHAUDIT_NUMERICS`` value."""


def mode(environ=None) -> str:
    """The numerics mode asked for: ``SYNTHAUDIT_NUMERICS`` (portable | native), portable if unset."""
    value = (environ if environ is not None else os.environ).get(ENV_VAR, "").strip().lower() or DEFAULT_MODE
    if value not in MODES:
        raise NumericsError(f"{ENV_VAR}={value!r}: use one of {', '.join(MODES)} "
                            "(portable: the same numbers on every x86-64 CPU with AVX2; native: the host's own "
                            "kernels, faster, other last bits on other CPUs; docs/reproducibility.md)")
    return value


def cpu_model() -> str:
    """The host CPU's model name (Linux ``/proc/cpuinfo``; the platform's word elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The host CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def host_isa(flags: frozenset[str] | None = None) -> str:
    """The highest vector ISA of the host that the libraries use: avx512, avx2, sse4.2, or the
    machine's architecture where it is not x86-64 (or the flags cannot be read)."""
    flags = cpu_flags() if flags is None else flags
    if platform.machine().lower() not in ("x86_64", "amd64") or not flags:
        return platform.machine().lower() or "unknown"
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "sse4.2" if "sse4_2" in flags else "sse2"


def portable_unavailable(flags: frozenset[str] | None = None) -> str | None:
    """Why the portable level cannot run here (None where it can): it needs an x86-64 CPU
    with AVX2 and FMA (numba and OpenBLAS would otherwise run instructions the CPU lacks)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"not an x86-64 CPU ({platform.machine()})"
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return "the CPU's features cannot be read (/proc/cpuinfo)"
    missing = [f for f in _REQUIRED_FLAGS if f not in flags]
    return f"the CPU lacks {', '.join(missing).upper()}" if missing else None


def portable_env(environ=None) -> dict:
    """The variables of the portable level. numpy's list of disabled features keeps the names
    already there (disabling more is still one fixed setting; the emulator test needs it)."""
    env = os.environ if environ is None else environ
    out = dict(PORTABLE_ENV)
    ours = out["NPY_DISABLE_CPU_FEATURES"].split()
    theirs = env.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split()
    out["NPY_DISABLE_CPU_FEATURES"] = " ".join(ours + [n for n in theirs if n not in ours])
    return out


class _State:
    mode: str | None = None  # what pin() applied
    unavailable: str | None = None
    late: tuple[str, ...] = ()  # libraries imported before pin() set their variables


_STATE = _State()


def pin(environ=None) -> dict:
    """Set the portable level's variables in ``environ`` (this process's environment, so
    every child process, every Snakemake job, inherits them), unless native is asked for.

    Called when synthaudit is imported, before it imports numpy, torch or numba. The
    variables override a user's own values of them: a mixed setting would be neither
    portable nor the host's own. Returns what :func:`provenance` records.
    """
    env = os.environ if environ is None else environ
    chosen = mode(env)
    env[ENV_VAR] = chosen  # children agree with this process even where it was unset
    _STATE.mode, _STATE.unavailable = chosen, None
    if chosen == "portable":
        _STATE.unavailable = portable_unavailable()
        if _STATE.unavailable is None:
            target = portable_env(env)
            inherited = all(env.get(k) == v for k, v in target.items())
            env.update(target)
            if environ is None:
                # a library imported before its variables were set may not follow them (numpy
                # reads its own at import); a Snakemake job inherits them, so it is never late
                _STATE.late = () if inherited else tuple(name for name in _LIBRARIES if name in sys.modules)
    return provenance()


def provenance() -> dict:
    """What the metrics record about the numbers' machine dependence: the mode, the ISA
    level the kernels ran at, and where the portable level could not apply, why."""
    chosen = _STATE.mode or mode()
    if chosen == "native":
        return {"numerics": "native", "isa": host_isa()}
    if _STATE.unavailable is not None:
        return {"numerics": "native", "isa": host_isa(), "portable_unavailable": _STATE.unavailable}
    return {"numerics": "portable", "isa": PORTABLE_ISA}


def describe() -> str:
    """One line for the logs."""
    p = provenance()
    if p["numerics"] == "portable":
        text = ("portable numerics (the same bits on any x86-64 CPU with AVX2: ATen and oneDNN AVX2, "
                "MKL COMPATIBLE, OpenBLAS Haswell, numba haswell, numpy without AVX-512)")
        if _STATE.late:
            text += f"; imported before synthaudit, so perhaps not pinned in this process: {', '.join(_STATE.late)}"
        return text
    why = p.get("portable_unavailable")
    return (f"native numerics ({p['isa']}): " + (f"portable unavailable, {why}" if why else
            f"{ENV_VAR}=native") + "; other CPUs give other last bits")

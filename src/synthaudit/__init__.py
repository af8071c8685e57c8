"""synthaudit: replica detection and privacy audits for synthetic 3D medical images.

The library is importable without Snakemake: every rule's script is a thin adapter
that reads ``snakemake.input/params`` and calls functions defined here.
"""

from . import numerics as _numerics

# Before anything imports numpy, torch or numba: the portable numerics (the same bits on every
# x86-64 CPU with AVX2; SYNTHAUDIT_NUMERICS=native lifts it). Set in this process's environment,
# so every Snakemake job inherits it (synthaudit/numerics.py, docs/reproducibility.md).
_numerics.pin()

__version__ = "0.2.0"  # the wheel's version (pyproject reads it here); results record it

"""synthaudit: replica detection and privacy audits for synthetic 3D medical images.

The library is importable without Snakemake: every rule's script is a thin adapter
that reads ``snakemake.input/params`` and calls functions defined here.
"""

__version__ = "0.2.0"  # the wheel's version (pyproject reads it here); results record it

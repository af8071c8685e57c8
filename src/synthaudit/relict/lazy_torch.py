"""A stand-in for the ``torch`` module until first used.

Why: the CPU path of MAE, RMSE and NCC runs numba kernels and NumPy only; importing torch would
add 1.5-2.6 s to each of those jobs (a quarter of their time on the demo). SSIM, and every measure
on a GPU, still use torch. A module writes ``torch = LazyTorch(__name__)``; the first attribute
read imports torch and puts the real module in that module's namespace.
"""

from __future__ import annotations

import sys


class LazyTorch:
    def __init__(self, owner: str):
        self._owner = owner

    def __getattr__(self, name: str):
        import torch as module

        setattr(sys.modules[self._owner], "torch", module)
        return getattr(module, name)

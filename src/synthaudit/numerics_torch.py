"""IEEE-exact torch helpers for the portable numerics (synthaudit/numerics.py).

Apart from :mod:`synthaudit.numerics` so that importing synthaudit (which pins the numerics in
every job) does not import torch: rules whose environment has no torch import the library too.
"""

from __future__ import annotations

from functools import lru_cache


def sqrt(x):
    """The IEEE square root of a torch tensor, differentiable: torch's own CPU ``sqrt`` (and
    ``x ** 0.5``) calls MKL's vector math, which is not correctly rounded and is not the same
    on every CPU. On CPU the values come from numpy (IEEE ``sqrt`` on every ISA); CUDA's
    ``sqrt`` is IEEE already."""
    import torch

    if x.device.type != "cpu" or not x.is_floating_point():
        return torch.sqrt(x)
    return _ieee_sqrt_function().apply(x)


@lru_cache(maxsize=1)
def _ieee_sqrt_function():
    """The autograd Function behind :func:`sqrt` (built on first use: torch loads lazily)."""
    import numpy as np
    import torch

    class IeeeSqrt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            values = x.detach().contiguous().numpy()
            y = torch.from_numpy(np.sqrt(values, out=np.empty_like(values)))
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad / (2 * y)

    return IeeeSqrt


def adam(params, lr: float, **kwargs):
    """``torch.optim.Adam`` with its fused kernel: one pass in ATen's own vector code with the
    IEEE square root; the default kernel's ``sqrt`` goes through MKL's vector math."""
    import torch

    return torch.optim.Adam(params, lr=lr, fused=True, **kwargs)

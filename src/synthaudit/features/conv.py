"""The encoders' 3D convolution on CPUs: oneDNN's kernels for every float32 inference, whatever the map's size.

Why: torch's rule for a CPU float32 convolution (``ConvParams::use_mkldnn``) sends a batch of one to its
unvectorised im2col path ("slow_conv3d", "slow_conv_dilated3d") wherever

* N * C * D * H of the input is at most 20,480 and the kernel is at most 3 wide in-plane
  (:data:`TORCH_SLOW_PATH_MAX`), or
* the kernel is 1 x 1 x 1, without stride or dilation, and torch runs on one thread.

The rule was tuned for small 2D images. In Astra's I3D ResNet-152 it caught most convolutions of
``layer3`` and ``layer4`` on grids below about 100 voxels a side (69 % of an 85^3 volume's time,
torch's profiler); in MedicalNet's ResNet-50 (RELICT's encoder, the demo's) on the demo's 61 x 73 x 61
grid it caught the dilated ``layer3``/``layer4`` and, under the demo profile's one thread, every
1 x 1 x 1 convolution. Either encoder ran about 2x slower alone than in a batch of two
(``bench/features/encoder_cost.py``). oneDNN's kernels are the ones torch takes for larger maps and
batches: with them a volume's embedding is the same bits alone or in any batch, and under the
portable numerics the same on every x86-64 CPU (``ONEDNN_MAX_CPU_ISA``, :mod:`synthaudit.numerics`).
"""

from __future__ import annotations

import torch
from torch import nn

# torch's rule (ConvParams::use_mkldnn): a batch of one whose N * C * D * H is at most this, with a kernel at
# most 3 wide in its last two axes, runs the im2col path, not oneDNN
TORCH_SLOW_PATH_MAX = 20480


def _onednn_usable() -> bool:
    return torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


class OneDnnConv3d(nn.Conv3d):
    """A ``Conv3d`` that takes oneDNN's kernels (``torch.mkldnn_convolution``) for every CPU float32
    inference: see the module's doc. Anything else (CUDA, autograd, other dtypes, padding other than
    zeros, a build without oneDNN or ``torch.backends.mkldnn.enabled = False``) keeps torch's own
    choice. A drop-in for ``nn.Conv3d``: the same parameters, so checkpoints load by name."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.device.type == "cpu" and x.dtype == torch.float32 and x.layout == torch.strided
                and not torch.is_grad_enabled() and self.padding_mode == "zeros"
                and isinstance(self.padding, tuple) and _onednn_usable()):
            x = x if x.is_contiguous(memory_format=torch.channels_last_3d) else x.contiguous()
            return torch.mkldnn_convolution(x, self.weight, self.bias, self.padding, self.stride, self.dilation,
                                            self.groups)
        return super().forward(x)

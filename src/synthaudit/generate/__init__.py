"""Generative models trained inside the workflow, to make synthetic volumes to audit.

* :mod:`.ldm` - a 3D latent diffusion model (MONAI ``AutoencoderKL`` +
  ``DiffusionModelUNet``), small enough to train on a CPU for demo data and the same
  code on a GPU for real data. An in-workflow generator lets the audit ask what a
  generator trained on *this* training set copies, not only judge volumes made elsewhere.
"""

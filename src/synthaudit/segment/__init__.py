"""Segmentation level of RELICT (section 2.3.3): label maps of synthetic and training volumes.

* :mod:`.measures` - Dice and average surface distance (google-deepmind
  surface-distance definition) per pair and between all synthetic and training
  label maps, with per-volume work done once.
* :mod:`.unet` - a MONAI 3D U-Net trained on the training labels, the in-workflow
  way to segment synthetic volumes when no external segmentation (RELICT used
  nnU-Net) is supplied.
"""

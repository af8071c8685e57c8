"""RELICT replica detection (Aydin et al., sections 2.3, 2.4 and 2.7, Appendix 1).

The pipeline is split so that each step can be tested against an analytic answer
(which measures exist, and their levels: :mod:`synthaudit.registry`):

* :mod:`.image_measures` - all-pairs image-level measures (MAE, RMSE, SSIM in fused
  passes, any other registered one per training volume) between the synthetic and the
  training volumes; the only expensive step, so it streams the training set and
  computes every per-volume quantity once (:mod:`.kernels`: the CPU loops).
* :mod:`.shards` - splitting an all-pairs job into blocks and gathering them.
* :mod:`.matrix` - the all-pairs matrix file every engine writes and every step reads.
* :mod:`.alignment` - alignment-aware variants: candidates, then the group search.
* :mod:`.ratio` - the distance ratio ``d(closest) / mean(d of the n closest)``;
  :mod:`.ranking` - the ranking of synthetic volumes from most to least likely replica.
* :mod:`.calibration` - calibrated calls against the held-out scans' null;
  :mod:`.copies` - copies per training patient (Dar et al.'s two percentages).
* :mod:`.evaluate` - threshold sweep, balanced accuracy and AUC against a rating;
  :mod:`.uncertainty` - out-of-bag bootstrap intervals; :mod:`.augmented` - per replica kind.
* :mod:`.recall` - generative-model recall and memorisation (Dombrowski et al.).

What a person reads from these files (tables, verdict) is :mod:`synthaudit.review`.
"""

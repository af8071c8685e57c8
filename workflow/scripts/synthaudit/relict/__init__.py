"""RELICT replica detection (Aydin et al., sections 2.3, 2.4 and 2.7, Appendix 1).

The pipeline is split so that each step can be tested against an analytic answer:

* :mod:`.image_measures` - all-pairs image-level measures (MAE, RMSE, SSIM) between
  the synthetic and the training volumes; the only expensive step, so it streams the
  training set and computes every per-volume quantity once.
* :mod:`.matrix` - the all-pairs matrix file every engine writes and every step reads.
* :mod:`.ratio` - the distance ratio ``d(closest) / mean(d of the n closest)``;
  :mod:`.ranking` - the ranking of synthetic volumes from most to least likely replica.
* :mod:`.evaluate` - threshold sweep, balanced accuracy and AUC against a rating.
"""

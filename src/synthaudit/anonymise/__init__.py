"""Feature-space anonymisation (Di Salvo et al., CVAE) against k-Same, audited by RELICT.

Instead of images or their embeddings, a data owner shares the decoder of a conditional
VAE trained on the embeddings (or vectors sampled from it). This package trains that
CVAE, builds the k-Same baseline, measures what the paper measures (nearest-neighbour
distance D, linear-probe AUC on a real test set, robustness to feature noise) and adds
what the paper did not: whether the shared vectors sit abnormally close to one training
patient, by RELICT's feature-level distance ratio and by a privacy filter's calibration.

Modules: ``data`` (labels, splits, one common scale), ``cvae``, ``ksame``, ``probe``
(downstream linear layer, offline and online), ``evaluate`` (D, AUC, audit, the whole
comparison), ``figures``.
"""

"""Fidelity beside privacy (issue 45): how good the samples are, on the embeddings the audit already
holds, each measure with a bootstrap CI and its real-vs-real floor (held-out scans against the
training scans: what a perfect generator would score on this data)."""

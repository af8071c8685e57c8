"""Membership inference on released samples (issue 64): can an attacker who holds a patient's scan tell,
from the synthetic set alone, that the patient trained the generator? Attacks (:mod:`.attacks`), their
patient-level evaluation (:mod:`.evaluate`), one set's audit (:mod:`.audit`) and its ROC figure
(:mod:`.figures`); docs/membership.md."""

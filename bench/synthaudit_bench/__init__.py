"""Benchmark of the all-pairs engines at RELICT's sizes (``python -m synthaudit_bench``).

Modules, one concern each: :mod:`.params` (the scales in ``bench/params.yaml``),
:mod:`.cohort` (simulated, cached cohorts on the preprocessed grid), :mod:`.run`
(each measure in a fresh process, timed; the orchestration), :mod:`.reference` (the
naive per-pair code it is compared with), :mod:`.report` (figures, targets, table).
Not part of the tests' run time: ``make bench-quick`` takes minutes, ``make bench``
about an hour on a workstation.
"""

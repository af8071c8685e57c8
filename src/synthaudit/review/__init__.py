"""What the review rules show a person: the paper's tables, rating sheets, filter
decisions and ranking pages (:mod:`.tables`), and the one-page verdict (:mod:`.verdict`).

Why apart from :mod:`synthaudit.relict`: nothing here computes a measure or a call; it
reads the ranking, calibration and evaluation files the RELICT rules wrote.
"""

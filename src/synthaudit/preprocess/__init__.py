"""Preprocessing (RELICT 2.1): affine registration to a template grid, intensity windowing and QC."""

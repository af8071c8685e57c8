"""Synthetic sets: the spiked set with known truth, and imported generator samples."""

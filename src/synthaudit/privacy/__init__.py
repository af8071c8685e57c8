"""Re-identification privacy filters (siamese networks), calibration and their tripartite evaluation."""

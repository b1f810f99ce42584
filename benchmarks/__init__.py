"""Benchmarks and calibration tooling for trainplan (not shipped in the package)."""

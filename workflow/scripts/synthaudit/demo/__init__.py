"""Embedded demo data sets, simulated so that the workflow runs without patient data."""

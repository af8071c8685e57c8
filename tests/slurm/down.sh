#!/usr/bin/env bash
# Stops the one-node cluster of tests/slurm/up.sh.
pkill -x slurmd 2>/dev/null || true
pkill -x slurmctld 2>/dev/null || true
pkill -x munged 2>/dev/null || true

#!/usr/bin/env bash
# The GPU proof (benchmarks/gpu_proof.py says what it checks): every CUDA path, then BERT-base speed.
#
#   bash benchmarks/gpu_proof.sh OUTDIR                        # one CUDA GPU, no network: about 9 minutes
#   bash benchmarks/gpu_proof.sh OUTDIR --device cpu --smoke   # the same parts on the CPU, tiny
#
# OUTDIR receives proof.log, proof.json and proof.md. The script ends itself before 540 s; the
# `timeout` here is only a backstop should it hang (the files then hold every check done so far).
# Exit 1: a check failed.
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
exec timeout --kill-after=5 570 "${PYTHON:-python3}" "$root/benchmarks/gpu_proof.py" "$@"

#!/usr/bin/env bash
# The one GPU check (device tool, carry [".whl"]): install the carried wheels beside the image's torch, then
# run the qwen3-gpu benchmark (speakwire.bench.qwen3.gpu) from this checkout's src/, not installed. Results
# and the log land in $OUT (come back to files_at). Extra arguments go to the benchmark.
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "${OUT:-/tmp}/nvidia-smi.txt"
python3 -m speakwire.bench.qwen3.gpu --out "${OUT:-bench/results/qwen3-gpu}" "$@" 2>&1 | tee "${OUT:-/tmp}/log.txt"

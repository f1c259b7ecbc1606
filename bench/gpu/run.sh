#!/usr/bin/env bash
# The one GPU check (device tool, carry [".whl"]): install the carried wheels beside the image's torch, then
# run the GPU check (bench/qwen3/gpu_check.py: the qwen3-gpu benchmark, speakwire.bench.qwen3.gpu, with the codes
# compared against the qwen_tts package's own) from this checkout's src/, not installed. Results and the log land
# in $OUT (come back to files_at). Extra arguments go to the benchmark; on a CPU:
#   bash bench/gpu/run.sh --device cpu --models 0.6B-Base --levels 1,2 --frames 8 --graph-levels 1 \
#       --equality-frames 8 --profile-level 0 --graph-equality-rows 2 --graph-equality-frames 8
# (PYTHON=.venv/bin/python there: an interpreter with the [qwen] extra; with no .whl/ nothing is installed.)
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "${OUT:-/tmp}/nvidia-smi.txt"
"$PYTHON" -m bench.qwen3.gpu_check --out "${OUT:-bench/results/qwen3-gpu}" "$@" 2>&1 | tee "${OUT:-/tmp}/log.txt"

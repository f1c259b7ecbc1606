#!/usr/bin/env bash
# Wheels the GPU machine lacks for speakwire.bench.qwen3.gpu (it has torch, numpy, scipy, numba, safetensors, ... but
# transformers 5.x, which qwen-tts 0.1.1 does not support). Run here, before the device call; the wheels land in
# .whl/ (git-ignored via .git/info/exclude) and travel with `carry: [".whl"]`.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
rm -rf .whl && mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  transformers==4.57.3 tokenizers==0.22.1 huggingface-hub==0.36.0 accelerate==1.12.0 \
  librosa==0.11.0 audioread==3.1.0 pooch==1.9.0 platformdirs==4.14.9 decorator==5.3.1 soxr==1.1.0 \
  soundfile==0.14.0 cffi==2.1.1 pycparser
# pure-Python packages (py3 wheels)
python3 -m pip download --quiet --no-deps -d .whl qwen-tts==0.1.1
python3 -m pip wheel --quiet --no-deps -w .whl sox==1.5.0   # an sdist on PyPI: build the py3 wheel here
du -sh .whl

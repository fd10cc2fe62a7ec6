#!/usr/bin/env bash
# Fills, here (with network), every git-ignored folder that benchmarks/install_on_gpu_machine.sh reads on
# the lent GPU machine (no network, 64 MiB carried per call), in one command:
#   .devw/, .ortgpu/00..04/, .gpuwheels/   ../shared/gpu/build-wheelhouse.sh (snakemake, onnxsim, LoadGen,
#                                          onnxruntime-gpu in five pieces, kaggle & co.)
#   .gpuwheels/ + onnxruntime-genai-cuda   (16 MB: the ort_genai engine on CUDA)
#   .ovwheel/                              openvino and openvino-telemetry (59 MB: a call of its own)
# Then, on the GPU machine, back to back (it goes after 30 s idle, /tmp with it): five calls carrying
# .ortgpu/NN (`mkdir -p /tmp/ortp && cp .ortgpu/NN/* /tmp/ortp/`), one carrying .ovwheel
# (`mkdir -p /tmp/ovp && cp .ovwheel/*.whl /tmp/ovp/`), then the working call carrying .devw and .gpuwheels
# (e.g. benchmarks/readme_run_on_gpu_machine.sh). vLLM is not among them: its wheel alone is larger than
# a call may carry, so the vllm engine's cells are recorded `unavailable` there.
#
#   usage: bash benchmarks/prepare_gpu_carry.sh     (from the project root; ../shared/gpu must exist)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bash ../shared/gpu/build-wheelhouse.sh
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d .gpuwheels onnxruntime-genai-cuda
rm -rf .ovwheel && mkdir -p .ovwheel
python3 -m pip download -q --no-deps "${plat[@]}" -d .ovwheel openvino openvino-telemetry
du -sh .devw .gpuwheels .ovwheel .ortgpu/*

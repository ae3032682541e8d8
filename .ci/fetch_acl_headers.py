#!/usr/bin/env python3
"""Fetches CANN's public ACL and HCCL headers for the compile checks of tests/test_ascend_headers.py: downloads one
pinned torch-npu wheel (never installed) and extracts only torch_npu/include/third_party/{acl,hccl}/inc into
.acl-headers/ (git-ignored) or $CAM_ACL_HEADERS. Does nothing when the headers are already there."""

import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

# The wheel is only a carrier for the headers: pinned so every run checks against the same ACL.
TORCH_NPU = "torch-npu==2.6.0.post5"
PLATFORM = "manylinux_2_17_x86_64"
PYTHON_VERSION = "3.11"
PREFIX = "torch_npu/include/third_party/"
PARTS = ("acl/inc/", "hccl/inc/")

ROOT = pathlib.Path(__file__).resolve().parent.parent


def destination() -> pathlib.Path:
    return pathlib.Path(os.environ.get("CAM_ACL_HEADERS") or ROOT / ".acl-headers")


def main() -> int:
    dest = destination()
    if (dest / "acl" / "inc" / "acl" / "acl_base.h").is_file():
        print(f"ACL headers already in {dest}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform", PLATFORM,
               "--python-version", PYTHON_VERSION, "--dest", tmp, "--quiet", TORCH_NPU]
        subprocess.run(cmd, check=True, timeout=600)
        wheels = list(pathlib.Path(tmp).glob("torch_npu-*.whl"))
        if len(wheels) != 1:
            print(f"expected one torch_npu wheel, found {wheels}", file=sys.stderr)
            return 1
        count = 0
        with zipfile.ZipFile(wheels[0]) as wheel:
            for info in wheel.infolist():
                name = info.filename
                if info.is_dir() or not name.startswith(PREFIX):
                    continue
                rel = name[len(PREFIX):]
                if not rel.startswith(PARTS) or ".." in pathlib.PurePosixPath(rel).parts:
                    continue
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(wheel.read(info))
                count += 1
    print(f"extracted {count} ACL/HCCL headers of {TORCH_NPU} into {dest}")
    return 0 if count else 1


if __name__ == "__main__":
    sys.exit(main())

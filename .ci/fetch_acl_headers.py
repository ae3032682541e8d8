#!/usr/bin/env python3
"""Fetches CANN's public ACL and HCCL headers for the compile checks of tests/test_ascend_headers.py: for each
torch-npu wheel of the matrix below, downloads it (never installed) and extracts only
torch_npu/include/third_party/{acl,hccl}/inc into <dest>/<version>/, where <dest> is .acl-headers/ (git-ignored)
or $CAM_ACL_HEADERS. A header set already extracted whole (its marker file) is not fetched again."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

# Each wheel is only a carrier for its headers, pinned so every run checks against the same ACL. 2.6.0.post5 is
# the first pin; 2.8.0 is what the afd-plugin consumer runs (2.8.0.post1-4 carry the same headers' release line);
# 2.14.0 is the first whose acl_rt.h declares device-memory IPC. Platform tags differ per release.
MATRIX = (
    ("2.6.0.post5", "manylinux_2_17_x86_64"),
    ("2.8.0", "manylinux_2_28_x86_64"),
    ("2.14.0", "manylinux_2_28_x86_64"),
)
PYTHON_VERSION = "3.11"
PREFIX = "torch_npu/include/third_party/"
PARTS = ("acl/inc/", "hccl/inc/")
MARKER = ".complete"  # written last: a set without it was interrupted and is fetched again
ATTEMPTS = 3
DOWNLOAD_TIMEOUT_S = 600

ROOT = pathlib.Path(__file__).resolve().parent.parent


def destination() -> pathlib.Path:
    return pathlib.Path(os.environ.get("CAM_ACL_HEADERS") or ROOT / ".acl-headers")


def header_set(version: str) -> pathlib.Path:
    return destination() / version


def download(version: str, platform: str, into: str) -> pathlib.Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform", platform,
           "--python-version", PYTHON_VERSION, "--dest", into, "--quiet", f"torch-npu=={version}"]
    last = ""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
            last = (res.stderr or res.stdout).strip().splitlines()[-1:] or [f"pip exited {res.returncode}"]
            last = last[0]
            if res.returncode == 0:
                wheels = list(pathlib.Path(into).glob("torch_npu-*.whl"))
                if len(wheels) == 1:
                    return wheels[0]
                last = f"expected one torch_npu wheel, found {[w.name for w in wheels]}"
        except subprocess.TimeoutExpired:
            last = f"pip download did not finish within {DOWNLOAD_TIMEOUT_S} s"
        if attempt < ATTEMPTS:
            time.sleep(5 * attempt)  # a passing index or network fault
    raise RuntimeError(f"torch-npu=={version} ({platform}): could not be downloaded after {ATTEMPTS} attempts: {last}")


def extract(wheel: pathlib.Path, target: pathlib.Path) -> int:
    count = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(PREFIX):
                continue
            rel = name[len(PREFIX):]
            if not rel.startswith(PARTS) or ".." in pathlib.PurePosixPath(rel).parts:
                continue
            out = target / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(zf.read(info))
            count += 1
    return count


def fetch(version: str, platform: str) -> str:
    final = header_set(version)
    if (final / MARKER).is_file():
        return f"torch-npu {version}: headers already in {final}"
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = download(version, platform, tmp)
        staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{version}.", dir=final.parent))
        staging.chmod(0o755)  # mkdtemp makes it 0700; the headers are public
        try:
            count = extract(wheel, staging)
            if not (staging / "acl" / "inc" / "acl" / "acl_base.h").is_file() or \
                    not (staging / "hccl" / "inc" / "hccl" / "hccl.h").is_file():
                raise RuntimeError(f"torch-npu=={version}: the wheel has no {PREFIX}{{acl,hccl}}/inc headers")
            (staging / MARKER).write_text(f"torch-npu=={version} {platform} {count} headers\n")
            shutil.rmtree(final, ignore_errors=True)  # an interrupted earlier extraction
            os.replace(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return f"torch-npu {version}: extracted {count} ACL/HCCL headers into {final}"


def main() -> int:
    failed = []
    for version, platform in MATRIX:
        try:
            print(fetch(version, platform))
        except (RuntimeError, OSError, zipfile.BadZipFile) as e:
            print(f"fetch_acl_headers: {e}", file=sys.stderr)
            failed.append(version)
    if failed:
        print(f"fetch_acl_headers: no headers for torch-npu {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m cam --cmake-dir`` / ``--include-dir`` / ``--info``: where the installed C++ SDK lives."""

import argparse
import sys

import cam


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cam", description=__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--cmake-dir", action="store_true", help="directory of camConfig.cmake")
    group.add_argument("--include-dir", action="store_true", help="directory of the public C headers")
    group.add_argument("--info", action="store_true", help="version, backend and platform")
    args = parser.parse_args(argv)
    if args.cmake_dir:
        print(cam.cmake_dir())
    elif args.include_dir:
        print(cam.include_dir())
    else:
        print(f"cam {cam.__version__} backend={cam.backend()} platform={cam._C.platform()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Prints the command lines of the first fenced code block of a Markdown file (one per line, blank lines and
comments dropped). Used by .ci/run and tests/test_readme.py, so both read the README the same way."""

import sys


def first_block(text: str) -> list:
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            if inside:
                return lines
            inside = True
            continue
        if inside and line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    raise SystemExit("no closed fenced code block found")


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print("\n".join(first_block(f.read())))

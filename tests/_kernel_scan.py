"""Source scans over the kernels for what bisheng rejects and g++ accepts (docs/twin.md, "What the twin enforces"):
device lambdas, whatever their capture list, and GM pointers that lost their __gm__ qualifier. A scan reads the
tree at a given root: the checkout, or a mutant's scratch tree (tests/_mutants.py)."""

from __future__ import annotations

import glob
import os
import re

# A lambda: a capture list (anything in brackets, including none, [x, this], [=, &y]) where an expression starts,
# then optional parameters, specifiers and a return type, then its body. An array subscript follows a name or a
# closing bracket, so the character before the '[' tells them apart.
LAMBDA = re.compile(r"(?:^|[=(,{;:?!&|]|\breturn)\s*\[[^\[\]]*\]\s*(?:\([^()]*\))?\s*(?:mutable\s*|constexpr\s*)*"
                    r"(?:noexcept\s*)?(?:->\s*[\w:<>,\s*&]+?\s*)?\{")
# A pointer parameter of an __aicore__ function typed void* without __gm__ (under bisheng GM is its own address space).
AICORE_FN = re.compile(r"__aicore__[^;{]*?\(([^)]*)\)")
BARE_VOID_PTR = re.compile(r"(?<!__gm__ )\b(?:const\s+)?void\s*\*")


def lambda_sites(text: str, name: str) -> list:
    sites = []
    for number, line in enumerate(text.splitlines(), start=1):
        code = line.split("//", 1)[0]
        if LAMBDA.search(code):
            sites.append(f"{name}:{number}")
    return sites


def bare_gm_pointer_sites(text: str, name: str) -> list:
    sites = []
    for number, line in enumerate(text.splitlines(), start=1):
        code = line.split("//", 1)[0]
        for m in AICORE_FN.finditer(code):
            if BARE_VOID_PTR.search(m.group(1).replace("__gm__ const", "const __gm__")):
                sites.append(f"{name}:{number}")
    return sites


def kernel_files(source_root: str) -> list:
    """Device sources: every kernel .h/.cpp except the twin and common/launch.h (the twin's host-side launch
    wrapper, whose lambda is host code)."""
    files = []
    for path in sorted(glob.glob(os.path.join(source_root, "kernels", "**", "*.*"), recursive=True)):
        rel = os.path.relpath(path, source_root)
        if rel.startswith(os.path.join("kernels", "twin")) or rel == os.path.join("kernels", "common", "launch.h"):
            continue
        if rel.endswith((".h", ".cpp")):
            files.append((path, rel))
    return files


def scan(source_root: str) -> dict:
    """{rule: [sites]} over the kernels of the tree at source_root."""
    found = {"device-lambda": [], "gm-qualifier": []}
    for path, rel in kernel_files(source_root):
        with open(path) as f:
            text = f.read()
        found["device-lambda"] += lambda_sites(text, rel)
        found["gm-qualifier"] += bare_gm_pointer_sites(text, rel)
    return found

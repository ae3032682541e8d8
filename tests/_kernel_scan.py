"""Source scans over the kernels for what bisheng rejects and g++ accepts (docs/twin.md, "What the twin enforces"):
device lambdas, whatever their capture list, and GM pointers that lost their __gm__ qualifier. Mutant blocks
(#if defined(CAM_MUTANT_X) ... #else ... #endif, tests/test_mutants.py) are resolved first, for no mutant by
default or for the one asked for, so the scans see the source a build with that switch compiles."""

from __future__ import annotations

import glob
import os
import re

MUTANT_IF = re.compile(r"#\s*if\s+(!?)\s*defined\((CAM_MUTANT_\w+)\)")


def resolve_mutants(text: str, enabled: frozenset = frozenset()) -> str:
    """The text with CAM_MUTANT_* conditionals resolved (other preprocessor lines kept); dropped lines become
    empty, so line numbers stay those of the file."""
    out, stack = [], []  # stack of (is a mutant block, taking this branch)
    for line in text.splitlines():
        s = line.strip()
        m = MUTANT_IF.match(s)
        if m:
            take = (m.group(2) in enabled) != (m.group(1) == "!")
            stack.append((True, take))
            out.append("")
            continue
        if s.startswith("#if"):
            stack.append((False, True))
        elif s.startswith("#else") and stack and stack[-1][0]:
            stack[-1] = (True, not stack[-1][1])
            out.append("")
            continue
        elif s.startswith("#endif") and stack:
            mutant, _ = stack.pop()
            if mutant:
                out.append("")
                continue
        live = all(take for _, take in stack)
        out.append(line if live else "")
    return "\n".join(out)


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


def scan(source_root: str, enabled: frozenset = frozenset()) -> dict:
    """{rule: [sites]} over the kernels, with the given mutants switched on."""
    found = {"device-lambda": [], "gm-qualifier": []}
    for path, rel in kernel_files(source_root):
        with open(path) as f:
            text = resolve_mutants(f.read(), enabled)
        found["device-lambda"] += lambda_sites(text, rel)
        found["gm-qualifier"] += bare_gm_pointer_sites(text, rel)
    return found

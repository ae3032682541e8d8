"""Source scans over the kernels for what bisheng rejects and g++ accepts (docs/twin.md, "What the twin enforces"):
device lambdas, whatever their capture list, GM pointers that lost their __gm__ qualifier, the C++ the device does
not run (virtual functions, the STL, dynamic allocation, runtime recursion), and a kernel entry whose op object is
not held to the stack budget (common/kernel_frame.h). Code compiled only for the twin (the #else side of an
`#if defined(__CCE__)`, as in common/launch.h and common/spin.h) is host code and is dropped first. A scan reads the
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


CCE_IF = re.compile(r"#\s*(?:if\s+(!?)\s*defined\s*\(?\s*__CCE__\s*\)?|ifdef\s+__CCE__|ifndef\s+__CCE__)\s*$")


def device_side(text: str) -> str:
    """The text bisheng compiles: the twin-only side of every __CCE__ conditional blanked (line numbers kept)."""
    out, stack = [], []  # per open #if: None (not about __CCE__) or whether this branch is the device's
    for line in text.splitlines():
        s = line.split("//", 1)[0].strip()
        m = CCE_IF.match(s)
        if m:
            stack.append(not (m.group(1) == "!" or s.startswith("#ifndef")))
            out.append("")
            continue
        if s.startswith("#if"):
            stack.append(None)
        elif s.startswith("#else") and stack and stack[-1] is not None:
            stack[-1] = not stack[-1]
            out.append("")
            continue
        elif s.startswith("#endif") and stack:
            if stack.pop() is not None:
                out.append("")
                continue
        out.append(line if all(b is not False for b in stack) else "")
    return "\n".join(out)


def _code_only(text: str) -> str:
    """Comments and the contents of string and character literals blanked, line breaks kept."""
    def blank(m):
        s = m.group(0)
        if s.startswith("/"):
            return re.sub(r"[^\n]", " ", s)
        return s[0] + " " * (len(s) - 2) + s[-1]
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S)


# The device's C++ (Ascend C programming guide, "C++ standard support"): no virtual functions, no STL, no malloc /
# new / free, no runtime recursion. <cstdint> and <cstddef> only name fixed-width types.
RESTRICTED = {
    "device-virtual": re.compile(r"\bvirtual\b"),
    "device-stl": re.compile(r"\bstd::|#\s*include\s*<(?!cstdint>|cstddef>)"),
    "device-alloc": re.compile(r"\b(?:malloc|calloc|realloc|free)\s*\(|\bnew\b|\bdelete\b"),
}
DELETED = re.compile(r"=\s*delete\b")  # a deleted member function allocates nothing
NOT_A_FUNCTION = {"if", "for", "while", "switch", "return", "sizeof", "catch", "decltype", "alignof", "static_assert"}
FUNCTION = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def _closing(text: str, i: int, open_: str, close: str) -> int:
    """The index of the bracket closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def _arity(args: str) -> tuple:
    """(the fewest, the most) arguments a parameter list takes, or the count of a call's arguments (twice)."""
    args = args.strip()
    if not args or args == "void":
        return 0, 0
    depth, parts, cur = 0, [], ""
    for ch in args:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return sum(1 for p in parts if "=" not in p), len(parts)


def recursion_sites(code: str, name: str) -> list:
    """Functions that call themselves: a definition `f(params) ... {` whose body calls f unqualified (or through
    this->) with an argument count its parameters take. An overload of another arity is not a call to itself, and a
    call through another object or a namespace is another function; mutual recursion is not seen."""
    sites = []
    for m in FUNCTION.finditer(code):
        fn = m.group(1)
        if fn in NOT_A_FUNCTION:
            continue
        close = _closing(code, m.end() - 1, "(", ")")
        after = re.match(r"\s*(?:const\s*)?(?:noexcept\s*)?(?:override\s*)?\{", code[close + 1:])
        if not after:
            continue
        lo, hi = _arity(code[m.end():close])
        body_start = close + after.end()
        body = code[body_start:_closing(code, body_start - 1, "{", "}")]
        for call in re.finditer(rf"(?:(?<![\w.:>])|this->){re.escape(fn)}\s*\(", body):
            args_end = _closing(body, call.end() - 1, "(", ")")
            n, _ = _arity(body[call.end():args_end])
            if lo <= n <= hi:
                sites.append(f"{name}:{code.count(chr(10), 0, body_start + call.start()) + 1}")
    return sites


def restricted_sites(code: str, name: str) -> dict:
    found = {rule: [] for rule in RESTRICTED}
    for number, line in enumerate(code.splitlines(), start=1):
        line = DELETED.sub("", line)
        for rule, pattern in RESTRICTED.items():
            if pattern.search(line):
                found[rule].append(f"{name}:{number}")
    found["device-recursion"] = recursion_sites(code, name)
    return found


# A kernel entry's op object, then the assertion holding it to the stack budget on the next line.
ENTRY = re.compile(r'extern\s+"."\s+__global__')  # "C" blanked with the other literals
OP_DECL = re.compile(r"^\s*(?:::)?(?:cam::kernels::)?[A-Z]\w*(?:<[^;]*>)?\s+(\w+)\s*;")
FRAME_ASSERT = "static_assert(cam::kernels::FitsKernelFrame<decltype({})>()"


def unbudgeted_op_sites(code: str, name: str) -> list:
    """Op objects declared in a kernel entry without FitsKernelFrame asserted right after."""
    sites = []
    for m in ENTRY.finditer(code):
        start = code.index("{", m.end())
        body = code[start:_closing(code, start, "{", "}")]
        lines = body.splitlines()
        first = code.count("\n", 0, start) + 1
        for i, line in enumerate(lines):
            d = OP_DECL.match(line)
            if d and not (i + 1 < len(lines) and lines[i + 1].strip().startswith(FRAME_ASSERT.format(d.group(1)))):
                sites.append(f"{name}:{first + i}")
    return sites


def kernel_files(source_root: str) -> list:
    """Device sources: every kernel .h/.cpp except the twin's."""
    files = []
    for path in sorted(glob.glob(os.path.join(source_root, "kernels", "**", "*.*"), recursive=True)):
        rel = os.path.relpath(path, source_root)
        if rel.startswith(os.path.join("kernels", "twin")):
            continue
        if rel.endswith((".h", ".cpp")):
            files.append((path, rel))
    return files


RULES = ("device-lambda", "gm-qualifier", *RESTRICTED, "device-recursion", "kernel-frame")


def scan(source_root: str) -> dict:
    """{rule: [sites]} over the kernels of the tree at source_root."""
    found = {rule: [] for rule in RULES}
    for path, rel in kernel_files(source_root):
        with open(path) as f:
            text = device_side(f.read())
        found["device-lambda"] += lambda_sites(text, rel)
        found["gm-qualifier"] += bare_gm_pointer_sites(text, rel)
        code = _code_only(text)
        for rule, sites in restricted_sites(code, rel).items():
            found[rule] += sites
        found["kernel-frame"] += unbudgeted_op_sites(code, rel)
    return found

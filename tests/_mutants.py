"""The mutation suite's mutants as patches (tests/mutants/<name>.patch): each re-introduces one defect into a scratch
copy of the sources, so the product kernels carry no mutant switches. A patch is a unified diff against the tree,
its first lines (before `---`) saying what defect it re-introduces.

Patches are applied here, not by `patch` or `git apply`: a hunk's context and removed lines must match the file
exactly (no fuzz; a hunk may have moved, it is looked for nearest its stated line first), so a patch whose context
has changed is reported, never half-applied or applied beside the code it meant. `git apply` run inside a
repository's subdirectory would also skip paths outside it without an error."""

from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATCH_DIR = os.path.join(ROOT, "tests", "mutants")
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# top-level entries a scratch tree never links (its own copy of the touched folders aside)
_NOT_LINKED = {".git", ".venv", "build"}


class PatchError(Exception):
    """A patch that does not apply to the tree (or is not a unified diff)."""


@dataclass
class Hunk:
    old_start: int  # 1-based, as the patch states it
    old: list = field(default_factory=list)  # context and removed lines
    new: list = field(default_factory=list)  # context and added lines
    added: list = field(default_factory=list)  # indexes into `new` of the added lines


@dataclass
class Patch:
    name: str
    description: str
    files: dict  # path relative to the tree -> [Hunk]


def patch_names() -> list:
    return sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(PATCH_DIR, "*.patch")))


def read_patch(name: str) -> Patch:
    path = os.path.join(PATCH_DIR, name + ".patch")
    with open(path) as f:
        lines = f.read().splitlines()
    i, description = 0, []
    while i < len(lines) and not lines[i].startswith("--- "):
        description.append(lines[i])
        i += 1
    files: dict = {}
    while i < len(lines):
        if not (lines[i].startswith("--- a/") and i + 1 < len(lines) and lines[i + 1].startswith("+++ b/")):
            raise PatchError(f"{name}.patch:{i + 1}: expected '--- a/<path>' then '+++ b/<path>'")
        rel = lines[i + 1][len("+++ b/"):].split("\t")[0]
        hunks = files.setdefault(rel, [])
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            m = HUNK.match(lines[i])
            if not m:
                raise PatchError(f"{name}.patch:{i + 1}: malformed hunk header")
            old_n = int(m.group(2) or 1)
            new_n = int(m.group(4) or 1)
            hunk = Hunk(int(m.group(1)))
            i += 1
            while len(hunk.old) < old_n or len(hunk.new) < new_n:
                if i >= len(lines):
                    raise PatchError(f"{name}.patch: hunk at {hunk.old_start} of {rel} ends early")
                line = lines[i]
                tag, text = (line[0], line[1:]) if line else (" ", "")
                if tag == " ":
                    hunk.old.append(text)
                    hunk.new.append(text)
                elif tag == "-":
                    hunk.old.append(text)
                elif tag == "+":
                    hunk.added.append(len(hunk.new))
                    hunk.new.append(text)
                elif tag != "\\":
                    raise PatchError(f"{name}.patch:{i + 1}: unexpected line {line!r}")
                i += 1
            hunks.append(hunk)
    if not files:
        raise PatchError(f"{name}.patch holds no diff")
    return Patch(name, " ".join(description).strip(), files)


def _find(lines: list, block: list, near: int, floor: int) -> int:
    """The start of `block` in lines[floor:] nearest `near`, or -1."""
    for d in range(len(lines) + 1):
        for at in (near - d, near + d) if d else (near,):
            if floor <= at <= len(lines) - len(block) and lines[at:at + len(block)] == block:
                return at
    return -1


def apply_to_text(patch: Patch, rel: str, text: str) -> tuple[str, list]:
    """(the file's patched text, the 1-based line numbers of the added lines in it)."""
    lines = text.split("\n")
    added, offset, floor = [], 0, 0
    for hunk in patch.files[rel]:
        at = _find(lines, hunk.old, hunk.old_start - 1 + offset, floor)
        if at < 0:
            raise PatchError(f"{patch.name}.patch no longer applies: the hunk at line {hunk.old_start} of {rel} "
                             "matches nothing in the file (its context or removed lines changed)")
        lines[at:at + len(hunk.old)] = hunk.new
        added += [at + k + 1 for k in hunk.added]
        offset = at - (hunk.old_start - 1) + len(hunk.new) - len(hunk.old)
        floor = at + len(hunk.new)
    return "\n".join(lines), added


def check_applies(name: str, root: str = ROOT) -> Patch:
    """Raises PatchError unless every hunk of the patch applies to the tree at `root`."""
    patch = read_patch(name)
    for rel in patch.files:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            raise PatchError(f"{name}.patch patches {rel}, which the tree no longer has")
        with open(path) as f:
            apply_to_text(patch, rel, f.read())
    return patch


@dataclass
class MutantTree:
    root: str  # the scratch tree: the checkout's entries as links, the folders the patch touches copied and patched
    patch: Patch
    added: dict  # path relative to the tree -> the 1-based numbers of the patch's added lines

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel)


def mutant_tree(name: str, dest: str, root: str = ROOT) -> MutantTree:
    """A scratch tree at `dest` holding the checkout with the patch `name` applied."""
    patch = read_patch(name)
    tops = {rel.split("/")[0] for rel in patch.files}
    os.makedirs(dest)
    for entry in os.listdir(root):
        if entry in _NOT_LINKED:
            continue
        if entry in tops:
            shutil.copytree(os.path.join(root, entry), os.path.join(dest, entry),
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            os.symlink(os.path.join(root, entry), os.path.join(dest, entry))
    added = {}
    for rel in patch.files:
        path = os.path.join(dest, rel)
        with open(path) as f:
            text, added[rel] = apply_to_text(patch, rel, f.read())
        with open(path, "w") as f:
            f.write(text)
    return MutantTree(dest, patch, added)

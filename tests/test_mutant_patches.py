"""The mutation suite's patches in the default tier: each still applies to the tree (an edit to a kernel that moves a
mutant's code breaks its patch here, not only in the suite's own CI stage), each is run by the suite, and no product
source or build file carries a mutant switch. The applier itself refuses a stale patch and reports the lines it
added."""

from __future__ import annotations

import glob
import os

import pytest

from _mutants import ROOT, PatchError, apply_to_text, check_applies, mutant_tree, patch_names, read_patch
from test_mutants import BUILD_MUTANTS, MUTANTS


@pytest.mark.parametrize("name", patch_names())
def test_every_patch_applies(name):
    patch = check_applies(name)
    assert patch.description, f"{name}.patch does not say what defect it re-introduces"


def test_every_mutant_has_a_patch_and_every_patch_a_mutant():
    assert sorted([*MUTANTS, *BUILD_MUTANTS]) == patch_names()


def test_product_sources_carry_no_mutant_switch():
    roots = ["kernels", "host", "tiling", "bindings", "cam", "cmake"]
    paths = [p for r in roots for p in glob.glob(os.path.join(ROOT, r, "**", "*"), recursive=True) if os.path.isfile(p)]
    paths += glob.glob(os.path.join(ROOT, "**", "CMakeLists.txt"), recursive=True)
    found = []
    for path in paths:
        if "/build/" in path or "/.venv/" in path or path.endswith((".pyc", ".so")):
            continue
        with open(path, errors="replace") as f:
            if "CAM_MUTANT" in f.read():
                found.append(os.path.relpath(path, ROOT))
    assert not found, "mutant switches in product sources (a mutant is a patch under tests/mutants/): " + str(found)


def test_a_stale_patch_is_refused():
    """Control: the patch applies to its file; negative: once a line of its context changes, it does not."""
    patch = read_patch("lost_abort")
    (rel,) = patch.files
    with open(os.path.join(ROOT, rel)) as f:
        text = f.read()
    patched, added = apply_to_text(patch, rel, text)
    assert added and all("PipeBarrier<PIPE_MTE3>" in patched.split("\n")[n - 1] for n in added)
    removed = patch.files[rel][0].old[3]  # the first line past the hunk's leading context
    stale = text.replace(removed, removed.replace("MTE3_MTE2", "MTE3_MTE2 "), 1)
    assert stale != text
    with pytest.raises(PatchError, match="lost_abort.patch no longer applies"):
        apply_to_text(patch, rel, stale)


def test_mutant_tree_copies_only_what_the_patch_touches(tmp_path):
    tree = mutant_tree("no_deqscale", str(tmp_path / "src"))
    assert os.path.islink(tree.path("host")) and not os.path.islink(tree.path("kernels"))
    with open(tree.path("kernels/common/quant.h")) as f, open(os.path.join(ROOT, "kernels/common/quant.h")) as g:
        mutated, product = f.read(), g.read()
    assert "SetDeqScale" in product and "SetDeqScale" not in mutated

"""The twin must refuse what the hardware would punish. Each case runs a test-only kernel (tests/twin/violations.cpp)
that breaks one rule and checks that the twin names the rule, the kernel, the block and the offending line; the
controls prove a correct kernel passes, so the checks are not tautologies."""

import os
import re
import shutil
import subprocess

import pytest
from _parallel import run_all
from _twin_build import build_twin_program
from _kernel_scan import bare_gm_pointer_sites, lambda_sites, scan, RESTRICTED

pytestmark = [pytest.mark.slow]

CASES = {
    # case: (rule the twin must report, block that breaks it or None when any block may)
    "ub_overflow": ("ub-capacity", None),
    "ub_api_scratch": ("ub-capacity", 0),
    "copy_length": ("copy-align", 0),
    "copy_ub_address": ("copy-align", 0),
    "vector_misaligned": ("vector-align", 0),
    "read_before_deque": ("queue-discipline", 0),
    "deque_empty": ("queue-discipline", 0),
    "alloc_exhausted": ("queue-discipline", 0),
    "use_after_free": ("queue-discipline", 0),
    "leak": ("queue-discipline", 0),
    "syncall_exit": ("syncall-exit", None),
    "syncall_cores": ("syncall-cores", None),
    "syncall_cores_910b3": ("syncall-cores", None),
    "gm_bounds": ("gm-bounds", 0),
    # cube path (twin/cube.h)
    "cube_cores": ("cube-cores", None),
    "l0a_overflow": ("cube-capacity", 0),
    "cube_buffer_in_vector_kernel": ("core-kind", 0),
    "ub_in_cube_kernel": ("core-kind", 0),
    "vector_in_cube_kernel": ("core-kind", 0),
    "mmad_enqueued_operand": ("queue-discipline", 0),
    "mmad_l0_bounds": ("l0-bounds", 0),
    # what bisheng and A2/A3 reject (docs/twin.md, "Rule -> public source")
    "reduce_max_work": ("ub-bounds", 0),
    "cast_without_deqscale": ("cast-deqscale", 0),
    "cast_unsupported": ("cast-support", 0),
    "syncall_not_mixed": ("syncall-kernel-type", None),
    "syncall_not_aiv_only": ("syncall-kernel-type", None),
    "two_pipes": ("one-tpipe", 0),
    "wait_without_set": ("flag-pairs", 0),
    "set_never_waited": ("flag-pairs", 0),
    "copy_pad_range": ("copy-range", 0),
    "l1_reserved": ("cube-capacity", 0),
    "loaddata_misaligned": ("cube-align", 0),
    "mmad_gemv": ("mmad-gemv", 0),
    "mmad_too_large": ("cube-params", 0),
    "mmad_no_barrier": ("mmad-barrier", 0),
    "mmad_uninit": ("mmad-init", 0),
    "signal_before_syncall": ("signal-order", None),
    "mmad_uninit_second_tile": ("mmad-init", 0),
    "fixpipe_msize": ("cube-params", 0),
    "fixpipe_nsize_zero": ("fixpipe-nsize", 0),
    "fixpipe_nsize_past_row": ("fixpipe-nsize", 0),
    "dcache_shared_line": ("dcache-shared-line", 1),
    "mte_into_dirty_line": ("dcache-shared-line", 0),
    "peer_scalar_store": ("peer-scalar-store", 0),
    "dcache_stale_line": ("dcache-stale-line", 1),
    "table_not_invalidated": ("dcache-table-not-invalidated", 0),
    "clean_no_dsb": ("dcache-clean-no-dsb", 0),
    "syncall_clean_no_dsb": ("dcache-clean-no-dsb", 0),
    "scalar_misaligned": ("scalar-align", 0),
    # the pipe-ordering model (docs/twin.md, "Pipe ordering"); each has a good_ control below
    "pipe_mte3_then_mte2": ("pipe-order", 0),
    "pipe_clean_then_mte2": ("dcache-clean-barrier", 0),
    "pipe_vecin_to_mte3": ("pipe-order", 0),
    "pipe_v_then_mte3": ("pipe-order", 0),
    "pipe_v_deep_then_mte3": ("pipe-order", 0),
    "pipe_pingpong_adjacent": ("pipe-order", 0),
    "pipe_inplace_v_then_mte2": ("pipe-order", 0),
    "syncall_no_batch_mode": ("syncall-batch-mode", None),
}

# Compile-time rules: each bad snippet of tests/twin/compile_checks.cpp must fail to compile against the twin (as
# it fails under bisheng), and its good twin must compile.
COMPILE_CHECKS = ["gm_addr", "event", "set_value", "pipe", "params", "kernel_frame"]


@pytest.fixture(scope="module")
def violations_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin") / "violations"), "violations.cpp")


def marker_line(source_root, case):
    path = os.path.join(source_root, "tests", "twin", "violations.cpp")
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            if f"@case:{case}" in line and not line.lstrip().startswith("//"):
                return number
    return None


def run_case(binary, case):
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20")
    return subprocess.run([binary, case], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("case", ["good_copy", "good_copy_48_cores", "stream", "good_cube", "good_vector",
                                  "pad_tail_poisoned", "good_mmad_barrier", "good_mmad_init", "own_scalar_store",
                                  "good_table_invalidated", "good_clean_dsb",
                                  "pipe_destroy_then_new", "good_pipe_mte3_then_mte2", "good_pipe_clean_then_mte2",
                                  "good_pipe_vecin_to_mte3", "good_pipe_v_then_mte3", "good_pipe_v_deep_then_mte3",
                                  "good_pipe_inplace_v_then_mte2", "good_pipe_pingpong_adjacent",
                                  "good_syncall_batch_mode", "good_fixpipe_odd_n", "good_signal_after_syncall"])
def test_correct_kernel_passes(violations_binary, case):
    result = run_case(violations_binary, case)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_violation_is_reported(violations_binary, source_root, case):
    rule, block = CASES[case]
    result = run_case(violations_binary, case)
    message = result.stdout.strip()
    assert result.returncode == 1, f"the twin accepted a broken kernel: {message!r} {result.stderr}"
    assert f"rule '{rule}' broken" in message, message
    assert f"in kernel {case} block" in message, message
    if block is not None:
        assert f" block {block}/" in message, message
    line = marker_line(source_root, case)
    if line is not None:
        assert re.search(rf"tests/twin/violations\.cpp:{line}\b", message), message
    if rule in ("pipe-order", "dcache-clean-barrier"):  # names both call sites: this op and the pending one
        assert len(re.findall(r"violations\.cpp:\d+", message)) >= 2, message


def test_dcache_across_launches(violations_binary, source_root):
    """CAM_TWIN_DCACHE_ACROSS_LAUNCHES=1: a line an earlier launch left cached, read again without an invalidate after
    GM changed, is refused; invalidating it first passes; without the mode the twin keeps each launch's cache fresh."""
    mode = {"CAM_TWIN_DCACHE_ACROSS_LAUNCHES": "1"}

    def run(case, env):
        return subprocess.run([violations_binary, case], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, CAM_TWIN_PLATFORM="twin", **env))

    bad = run("dcache_earlier_launch", mode)
    assert bad.returncode == 1 and "rule 'dcache-earlier-launch' broken" in bad.stdout, bad.stdout + bad.stderr
    assert "in kernel dcache_earlier_launch block" in bad.stdout
    assert f"violations.cpp:{marker_line(source_root, 'dcache_earlier_launch')}" in bad.stdout, bad.stdout
    good = run("good_dcache_later_launch", mode)
    assert good.returncode == 0 and good.stdout.strip() == "OK", good.stdout + good.stderr
    default = run("dcache_earlier_launch", {"CAM_TWIN_DCACHE_ACROSS_LAUNCHES": "0"})
    assert default.returncode == 0 and default.stdout.strip() == "OK", default.stdout + default.stderr


def test_signal_order_names_both_writes(violations_binary, source_root):
    """Whichever block the twin catches (the signal after block 1's write, or block 1's write after the signal), the
    message names the signal and the other block's write."""
    message = run_case(violations_binary, "signal_before_syncall").stdout
    with open(os.path.join(source_root, "tests", "twin", "violations.cpp")) as f:
        lines = {site: n for n, line in enumerate(f, 1) for site in ("peer_data", "peer_signal") if f"@site:{site}" in line}
    for site, number in lines.items():
        assert f"violations.cpp:{number}" in message, (site, message)


@pytest.mark.parametrize("case, expected", [
    ("flag_clean_invalidate", "seen"),    # control: store + clean, invalidate + load
    ("flag_missing_invalidate", "stale"),  # the reader keeps hitting its cached copy
])
def test_scalar_data_cache(violations_binary, case, expected):
    """With the DCache model on (the default), a flag hand-off works only with the documented cache maintenance."""
    result = run_case(violations_binary, case)
    assert result.returncode == 0 and result.stdout.strip() == expected, result.stdout + result.stderr


def test_store_never_cleaned_is_lost(violations_binary):
    """The store stays in the writer's cache line (the reader sees nothing), and the line is not written back when
    the kernel ends: the writer's block is refused, naming the store, and GM still holds the old value (control:
    flag_clean_invalidate above, where the cleaned store reaches GM and the reader sees it)."""
    result = run_case(violations_binary, "flag_missing_clean")
    message = result.stdout.strip()
    assert result.returncode == 1 and "rule 'dcache-dirty-at-exit' broken" in message, message + result.stderr
    assert re.search(r"violations\.cpp:\d+", message), message
    assert "flag in GM after the kernel: 0" in message, message


def test_dcache_can_be_turned_off_for_diagnosis(violations_binary):
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20", CAM_TWIN_DCACHE="0")
    result = subprocess.run([violations_binary, "flag_missing_invalidate"], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "seen", result.stdout + result.stderr


def _compile_check(source_root, name):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    path = os.path.join(source_root, "tests", "twin", "compile_checks.cpp")
    with open(path) as f:
        number = re.search(rf"#define CHECK_{name} (\d+)", f.read()).group(1)
    return [compiler, "-std=c++20", "-fsyntax-only", "-Werror=narrowing", "-I",
            os.path.join(source_root, "kernels", "twin", "include"), f"-DCHECK={number}", path]


@pytest.mark.parametrize("check", COMPILE_CHECKS)
def test_bisheng_rejects_do_not_compile(source_root, check):
    good, bad = run_all([_compile_check(source_root, f"good_{check}"), _compile_check(source_root, f"bad_{check}")],
                        timeout=120, capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    assert bad.returncode != 0, f"the twin compiled bad_{check}, which bisheng rejects"


# A lambda handed to an __aicore__ template is not device code under bisheng; kernels use small functors with an
# __aicore__ operator() instead. A GM pointer passed as void* loses its address space under bisheng. Both are
# source scans (tests/_kernel_scan.py) over the kernels.
def test_no_device_lambdas(source_root):
    sites = scan(source_root)["device-lambda"]
    assert not sites, "device lambdas (use a functor with an __aicore__ operator()): " + ", ".join(sites)


def test_gm_pointers_keep_their_qualifier(source_root):
    sites = scan(source_root)["gm-qualifier"]
    assert not sites, "void* parameters of __aicore__ functions without __gm__: " + ", ".join(sites)


@pytest.mark.parametrize("bad", ["    const bool go = decision_.Decide([&] { return Control(); }, cycles);",
                                 "    const bool go = decision_.Decide([x, this] { return Control(); }, cycles);",
                                 "    auto f = [=, &y](int a) mutable -> int { return a + y; };",
                                 "    return [x] { return x; };",
                                 "    Run(buf_[i], [](uint32_t n) { (void)n; });"])
def test_lambda_scan_finds_a_lambda(bad):
    assert lambda_sites(bad, "x.cpp") == ["x.cpp:1"]


@pytest.mark.parametrize("good", ["    const bool go = decision_.Decide(ControlStep{this}, cycles);",
                                  "    x_[rowOffset + col] = T{1};", "    GM_ADDR dst_[kMaxScatter] = {};",
                                  "    int32_t staged[4] {1, 2, 3, 4};"])
def test_lambda_scan_passes_what_is_no_lambda(good):
    assert lambda_sites(good, "x.cpp") == []


def test_gm_qualifier_scan():
    assert bare_gm_pointer_sites("__aicore__ inline void WaitPause(const void* watched, uint32_t i) {", "x.h") == ["x.h:1"]
    assert bare_gm_pointer_sites("__aicore__ inline void WaitPause(const __gm__ void* watched, uint32_t i) {",
                                 "x.h") == []


# The device's C++ (docs/twin.md, "Device code"): no virtual functions, STL, dynamic allocation or recursion, and
# each kernel entry's op object held to the stack budget. Control: the kernels as they are.
DEVICE_RULES = [*RESTRICTED, "device-recursion", "kernel-frame"]


@pytest.mark.parametrize("rule", DEVICE_RULES)
def test_kernels_keep_to_device_cpp(source_root, rule):
    sites = scan(source_root)[rule]
    assert not sites, f"{rule}: " + ", ".join(sites)


ENTRY = """extern "C" __global__ __aicore__ void cam_x(GM_ADDR x, cam::kernels::XTilingData tiling) {{
    cam::kernels::X{op} op;
{after}    op.Init(x, tiling);
}}
"""
BUDGET = '    static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");\n'

# rule -> (device code that breaks it, device code close to it that does not)
DEVICE_CASES = {
    "device-virtual": ("class Op {\n    virtual __aicore__ void Process();\n};\n",
                       "class Op {\n    __aicore__ void Process();  // not virtual: no vtable on the device\n};\n"),
    "device-stl": ("#include <cstdint>\n#include <vector>\n",
                   '#include <cstdint>\n__aicore__ inline int64_t F() { const char* s = "std::vector"; return 0; }\n'),
    "device-alloc": ("__aicore__ inline int64_t* F() {\n    return new int64_t[4];\n}\n",
                     "class Op {\n    Op(const Op&) = delete;\n    int64_t renewed_ = 0;\n};\n"),
    "device-recursion": ("__aicore__ inline uint64_t Sum(uint64_t n) {\n    return n == 0 ? 0 : n + Sum(n - 1);\n}\n",
                         "__aicore__ inline int64_t Load(GM_ADDR b, int64_t i) { return Load(b, 0, i); }\n"
                         "__aicore__ inline void Init(GM_ADDR b) {\n    plane_.Init(b);\n}\n"),
    "kernel-frame": (ENTRY.format(op="<half>", after=""), ENTRY.format(op="<half>", after=BUDGET)),
}


def _scratch_tree(tmp_path, text):
    (tmp_path / "kernels" / "x").mkdir(parents=True)
    (tmp_path / "kernels" / "x" / "x.cpp").write_text(text)
    return str(tmp_path)


@pytest.mark.parametrize("rule", DEVICE_RULES)
def test_device_cpp_scan_finds_the_defect(tmp_path, rule):
    bad, _ = DEVICE_CASES[rule]
    found = scan(_scratch_tree(tmp_path, bad))
    assert found[rule] == ["kernels/x/x.cpp:2"], found
    assert not [r for r, sites in found.items() if sites and r != rule], found


@pytest.mark.parametrize("rule", DEVICE_RULES)
def test_device_cpp_scan_passes_the_control(tmp_path, rule):
    _, good = DEVICE_CASES[rule]
    found = scan(_scratch_tree(tmp_path, good))
    assert not [sites for sites in found.values() if sites], found


def test_device_cpp_scan_skips_twin_only_branches(tmp_path):
    """What only the twin compiles (the #else side of __CCE__) is host code; the device side is scanned."""
    text = ("#if defined(__CCE__)\n#define WAIT(x) (void)(x)\n#else\n#include <string>\n"
            "#define WAIT(x) std::string(x)\n#endif\n")
    assert not scan(_scratch_tree(tmp_path, text))["device-stl"]
    (tmp_path / "kernels" / "x" / "x.cpp").write_text(text.replace("(void)(x)", "std::string(x)"))
    assert scan(str(tmp_path))["device-stl"] == ["kernels/x/x.cpp:2"]

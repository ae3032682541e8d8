"""The standing mutation suite: every kernel defect a review found is re-introduced by a patch
(tests/mutants/<name>.patch, applied by tests/_mutants.py to a scratch copy of the sources, so no product kernel
carries a mutant switch and no wheel contains one), and the twin must refuse each mutant. A mutant counts as caught
only if the rule named for it appears in the error of the run that executed the broken code within 10 s, while the
unmutated build passes the same run; a crash, a timeout, another rule or a silent pass is a miss. The summary line is `mutants N, caught N`.

Three kinds of runs, each sharing what it can:
- source scans (tests/_kernel_scan.py) for what bisheng rejects at compile time (a device lambda, a GM pointer that
  lost __gm__), over the mutant's tree;
- the SDK data-plane round trip (tests/sdk_dataplane/round_trip.cpp; on ascend910b4, where dispatch_send runs two
  blocks, for the signal-order mutant): a round trip, then a bounded wait that
  expires and raises every rank's abort word), linked from objects: the host library, tiling, twin and the kernels
  a mutant cannot touch are compiled once; per mutant only the four data-plane kernels, side by side;
- the window_table kernel over the twin's HCCL context (tests/sdk_ascend/hccl_context.cpp) on the A3 description;
- one W2 call through the SDK (tests/twin/gmm_fixpipe.cpp: N = 72, one N tile narrower than the cube's 96-column
  one; K = 300, two accumulating k steps into a small tile; a one-row group; before it the same call in W4A8 at
  K = 301, through the int4 tile loop; after it one W1 call per output channel at N = 72), linked from the same
  shared objects with only the GMM kernels rebuilt per mutant (the W2 calls run W2's mixed kernel, the W4A8 one after
  the split, and the last W1's);
- one dynamic_quant call through the SDK (tests/twin/quant_rules.cpp: 1000 columns, 16 vector repeats a row), the
  same way with only the dynamic_quant kernel rebuilt;
- compile-only mutants, for what bisheng refuses to compile and the twin's headers refuse the same way (a
  `GM_ADDR` list, `AscendC::event_t`): the patched kernel source is compiled, and it counts as caught only if the
  compiler's error is at a line the patch added and says what the rule expects;
- one build mutant: the defect that lives in the build description, not in a kernel source (bisheng's automatic
  sync not stated), a patch to cmake/ built with the stand-in bisheng of tests/test_ascend_build.py; caught if the
  check on every kernel's command line fails for the patched tree and passes for the checkout.

That every patch still applies to the tree is checked in the default tier (tests/test_mutant_patches.py).

Compiling all that takes minutes on the shared machines, so the suite is not in the default run: it runs with
CAM_MUTANTS=1 (or `-m mutation`), as its own CI stage."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from _kernel_scan import scan
from _mutants import mutant_tree
from _parallel import run_all
from _twin_build import SELFTEST_FLAGS, build_twin_program, twin_objects

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = [pytest.mark.mutation, pytest.mark.timeout(3000)]


def _enabled(config) -> bool:
    return os.environ.get("CAM_MUTANTS") == "1" or "mutation" in (config.getoption("-m") or "")


@pytest.fixture(autouse=True, scope="module")  # module scope: it runs before the module's build fixtures
def _only_when_asked(request):
    if not _enabled(request.config):
        pytest.skip("the mutation suite runs with CAM_MUTANTS=1 or -m mutation (its own CI stage)")


# mutant (its patch, tests/mutants/<name>.patch) -> (how it is run, the rule that must name it, the kernel that must
# be named or None)
MUTANTS = {
    # the lost abort: SignalPort::Send with PipeBarrier<PIPE_MTE3> instead of the MTE3 -> MTE2 flag
    "lost_abort": ("plane", "pipe-order", None),
    # the scalar tables' clean without the barrier before MTE2 reads them. That barrier also orders
    # StoreUbTables' MTE3 copies of the index tables before MoveTables' MTE2 reads of them (a second hazard the
    # model found behind the first): with this plane's UB tables that one is hit first, so either rule counts.
    "clean_no_barrier": ("plane", ("dcache-clean-barrier", "pipe-order"), "cam_dispatch_send"),
    # once missed by every test: the byte mover's MTE2 -> MTE3 flag dropped (a VECIN hand-off orders MTE2 before V only)
    "mover_no_mte2_mte3": ("plane", "pipe-order", None),
    # once missed by every test: an own-state scalar store without its clean (lost at kernel end)
    "state_no_clean": ("plane", "dcache-dirty-at-exit", None),
    # A3 peer windows: the deprecated tiling-less Hccl::Init on the A3 context
    "hccl_no_init_tiling": ("hccl", "hccl-init-tiling", "cam_window_table"),
    # window_table without its bound of the world to the A2 flat layout's 32 windows, given a world of 40
    "hccl_a2_ranks": ("hccl", "hccl-a2-ranks", "cam_window_table"),
    # window_table's Hccl client never finalized
    "hccl_no_finalize": ("hccl", "hccl-finalize", "cam_window_table"),
    # once missed by every test: a device lambda with a [x, this] capture
    "lambda_capture": ("scan", "device-lambda", None),
    # the lost address space: WaitPause's GM pointer as const void*
    "gm_as_void": ("scan", "gm-qualifier", None),
    # a data-plane launch (hard SyncAll) that does not ask for batch scheduling mode
    "no_batch_mode": ("plane", "syncall-batch-mode", None),
    # the GMM's Fixpipe writes the cube's padded width (a multiple of 32) into accumulator rows N apart (W1's whole
    # row tile per output channel; W2's compact unit slot has room for it)
    "fixpipe_padded_n": ("gmm", "fixpipe-nsize", "cam_gmm_swiglu_quant_multi_layer"),
    # the first review's: Mmad given a group's real row count, m = 1 for a one-row group (GEMV mode reads L0A as ND)
    "mmad_gemv": ("gmm", "mmad-gemv", "cam_gmm_multi_layer"),
    # W4A8's int4 tile loop (docs/twin.md, "int4 operands"), run by the driver's W4A8 W2 call at K = 301 (the mixed
    # kernel's cube side): an int8 x int4
    # Mmad; A from the lo rows with both planes' m (K read in int4 fractals of 64); an odd-K int4 copy
    "mmad_int4_by_int8": ("gmm", "mmad-int4-pair", "cam_gmm_multi_layer"),
    "mmad_int4_short_a": ("gmm", "mmad-int4-k", "cam_gmm_multi_layer"),
    "int4_odd_k_copy": ("gmm", "int4-pair", "cam_gmm_multi_layer"),
    # dispatch_send's block 0 signalling the FFN rank without the SyncAll after every block's token writes
    "signal_before_syncall": ("plane", "signal-order", "cam_dispatch_send"),
    # combine_recv's send-count read without its invalidate (an earlier launch "already did it"), under the twin's
    # mode in which lines outlive a launch
    "stale_line_earlier_launch": ("plane", "dcache-earlier-launch", "cam_combine_recv"),
    # every Mmad of a tile accumulating: the first adds to what L0C held before
    "mmad_uninit": ("gmm", "mmad-init", "cam_gmm_multi_layer"),
    # the first review's: no PipeBarrier<PIPE_M> between accumulating Mmads under (m/16)(n/16) = 10
    "no_pipe_m_barrier": ("gmm", "mmad-barrier", "cam_gmm_multi_layer"),
    # W2's mixed kernel: the vector cores read a unit from the ring without waiting for the cube's "full"
    # (whichever side of the race the threads meet first: the read of unpublished bytes, or the cube's write over
    # bytes read without a free it waited for)
    "w2_read_before_full": ("gmm", ("cross-core-read-before-flag", "cross-core-write-before-free",
                                     "cross-core-unmatched-set"),
                            "cam_gmm_multi_layer"),
    # the first review's: ReduceMax's work buffer of one element per repeat (it writes value and index)
    "reduce_work_half": ("quant", "ub-bounds", "cam_dynamic_quant"),
    # the first review's: int32 -> half Cast without SetDeqScale (a dequant through whatever DEQSCALE holds)
    "no_deqscale": ("quant", "cast-deqscale", "cam_dynamic_quant"),
    # the first review's: a hard-SyncAll kernel not declared mixed (combine_recv)
    "syncall_not_mix": ("plane", "syncall-kernel-type", "cam_combine_recv"),
    # the first review's: a signal into a peer's window by scalar store and clean instead of MTE3 from UB
    "peer_scalar_signal": ("plane", "peer-scalar-store", None),
    # the first review's: GM_ADDR a = ..., b = ...; (GM_ADDR is a macro: b is a uint8_t)
    "gm_addr_list": ("compile", "gm_addr", "gmm_multi_layer/gmm_multi_layer.cpp"),
    # the first review's: AscendC::event_t, which bisheng does not declare (event_t is global)
    "ascendc_event_t": ("compile", "event", "dynamic_quant/dynamic_quant.cpp"),
    # a device function that calls itself (the device runs no recursion)
    "device_recursion": ("scan", "device-recursion", None),
    # a RowBatch remembering 2048 scatter destinations: the op objects holding one outgrow the kernel frame budget
    "kernel_frame": ("compile", "kernel-frame", "combine_send/combine_send.cpp"),
}

# compile rule (the check's name in tests/twin/compile_checks.cpp, which holds its bad snippet and control) -> what
# g++'s error at a line the patch added must say; the twin's headers declare what bisheng declares. Quotes are ASCII
# or typographic, as g++'s locale makes them.
Q = "['\u2018\u2019]"
COMPILE_RULES = {
    "gm_addr": rf"cannot convert {Q}std::nullptr_t{Q} to {Q}uint8_t{Q}",
    "event": rf"{Q}event_t{Q} (?:is not a member of {Q}AscendC{Q}|in namespace {Q}AscendC{Q} does not name)",
    "kernel-frame": r"static assertion failed: op object over the kernel frame budget",
}
# compile rules whose error is where the rule is asserted (a kernel entry's FitsKernelFrame), not at the patch's lines
ASSERTED_RULES = {"kernel-frame": "FitsKernelFrame"}

# The second review's fix 5 lives in the Ascend build (cmake/CamAscend.cmake passes bisheng --cce-auto-sync, which the
# twin's automatic-sync table stands for), so its patch is to cmake/, built with the stand-in bisheng: mutant -> the
# check that must fail. Counted in the summary with the others.
BUILD_MUTANTS = {"build_no_auto_sync": "auto-sync-option"}

DATAPLANE_KERNELS = ["dispatch_send", "dispatch_recv", "combine_send", "combine_recv"]
FLAGS = SELFTEST_FLAGS  # the twin objects are the session's (tests/_twin_build.py)


def _gxx() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not available")
    return gxx


def _kernel_includes(tree: str) -> list:
    return ["-I", os.path.join(tree, "kernels"), "-I", os.path.join(tree, "kernels", "twin", "include"),
            "-Werror=narrowing"]


_trees: dict = {}


def _tree(name: str) -> str:
    """The scratch tree of mutant `name` (built once per session), or the checkout for None."""
    if name is None:
        return ROOT
    if name not in _trees:
        _trees[name] = mutant_tree(name, os.path.join(tempfile.mkdtemp(prefix="cam-mutant-"), "src"))
    return _trees[name].root


@pytest.fixture(scope="module", autouse=True)
def _remove_trees():
    yield
    for tree in _trees.values():
        shutil.rmtree(os.path.dirname(tree.root), ignore_errors=True)
    _trees.clear()


class _PlaneBuild:
    """Objects of the SDK round trip: everything but the data-plane kernels once, those per mutant."""

    def __init__(self, out: str):
        self.out = out
        self.gxx = _gxx()
        # host/twin/: the twin backend the SDK round trip runs on (docs/architecture.md)
        host = [p for p in sorted(glob.glob(os.path.join(ROOT, "host", "src", "*.cpp"))
                                  + glob.glob(os.path.join(ROOT, "host", "twin", "*.cpp")))
                if os.path.basename(p) not in ("backend_ascend.cpp", "tensor_list_ascend.cpp", "transport_hccl.cpp")]
        tiling = sorted(glob.glob(os.path.join(ROOT, "tiling", "src", "*.cpp")))
        others = [p for p in sorted(glob.glob(os.path.join(ROOT, "kernels", "*", "*.cpp")))
                  if "/twin/" not in p and os.path.basename(os.path.dirname(p)) not in DATAPLANE_KERNELS]
        # The SDK test's own include: <cam/window_layout.h> is kernels/common/window_layout.h installed.
        sdk_inc = os.path.join(out, "sdk-include")
        os.makedirs(os.path.join(sdk_inc, "cam"), exist_ok=True)
        shutil.copy(os.path.join(ROOT, "kernels", "common", "window_layout.h"), os.path.join(sdk_inc, "cam"))
        inc = {
            "host": ["-I", os.path.join(ROOT, "host", "include"), "-I", os.path.join(ROOT, "host", "src"),
                     "-I", os.path.join(ROOT, "tiling", "include"), "-I", os.path.join(ROOT, "kernels"),
                     "-I", os.path.join(ROOT, "kernels", "twin", "include")],
            "kernel": _kernel_includes(ROOT),
            "sdk": ["-I", os.path.join(ROOT, "host", "include"), "-I", sdk_inc],
        }
        self.inc = inc
        units = [(p, inc["host"]) for p in host + tiling] + [(p, inc["kernel"]) for p in others]
        units.append((os.path.join(ROOT, "tests", "sdk_dataplane", "round_trip.cpp"), inc["sdk"]))
        self.base = []
        commands = []
        for i, (src, includes) in enumerate(units):
            obj = os.path.join(out, f"base-{i}-{os.path.basename(src)}.o")
            self.base.append(obj)
            commands.append([self.gxx, *FLAGS, *includes, "-c", src, "-o", obj])
        run_all(commands, timeout=900, check=True, capture_output=True)
        self.round_trip = self.base[-1]
        # op kernel -> its unmutated object, which an op mutant's link replaces
        self.kernel_objects = {os.path.basename(src): obj for (src, _), obj in zip(units, self.base)
                               if src.startswith(os.path.join(ROOT, "kernels"))}
        self.base += twin_objects(ROOT, flags=FLAGS)
        self.drivers = {}

    def link(self, name: str, mutant: str | None) -> str:
        """The round trip with the data-plane kernels of `mutant`'s tree (the checkout's for None)."""
        tree = _tree(mutant)
        objs, commands = [], []
        for k in DATAPLANE_KERNELS:
            obj = os.path.join(self.out, f"{name}-{k}.o")
            objs.append(obj)
            commands.append([self.gxx, *FLAGS, *_kernel_includes(tree), "-c",
                             os.path.join(tree, "kernels", k, f"{k}.cpp"), "-o", obj])
        run_all(commands, timeout=900, check=True, capture_output=True)
        exe = os.path.join(self.out, name)
        subprocess.run([self.gxx, *FLAGS, *self.base, *objs, "-o", exe, "-lrt"], check=True, timeout=300,
                       capture_output=True)
        return exe


    def link_op(self, kind: str, name: str, mutant: str | None) -> str:
        """An op driver (OP_RUNS[kind]) over the shared objects (the control's data-plane kernels) and its op kernel
        from `mutant`'s tree; call after link("control", None)."""
        driver, *kernels = OP_RUNS[kind]
        if driver not in self.drivers:
            obj = os.path.join(self.out, f"driver-{kind}.o")
            subprocess.run([self.gxx, *FLAGS, *self.inc["sdk"], "-I", os.path.join(ROOT, "tests", "sdk"), "-c",
                            os.path.join(ROOT, "tests", "twin", driver), "-o", obj], check=True,
                           timeout=300, capture_output=True)
            self.drivers[driver] = obj
        unmutated = [self.kernel_objects[os.path.basename(k)] for k in kernels]
        ops = unmutated
        if mutant:
            # Every kernel source that compiles the mutated code (a shared header's inline class is one definition
            # per program: an unmutated copy in another kernel's object could be the one the linker keeps).
            tree = _tree(mutant)
            ops = [os.path.join(self.out, f"{name}-{os.path.basename(k)}.o") for k in kernels]
            for k, op in zip(kernels, ops):
                subprocess.run([self.gxx, *FLAGS, *_kernel_includes(tree), "-c",
                                os.path.join(tree, "kernels", k), "-o", op],
                               check=True, timeout=300, capture_output=True)
        objs = [o for o in self.base if o != self.round_trip and o not in unmutated] + [*ops, self.drivers[driver]]
        objs += [os.path.join(self.out, f"control-{k}.o") for k in DATAPLANE_KERNELS]
        exe = os.path.join(self.out, name)
        subprocess.run([self.gxx, *FLAGS, *objs, "-o", exe, "-lrt"], check=True, timeout=300, capture_output=True)
        return exe


def _run(exe: str, *args, env=None) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    res = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, CAM_TWIN_SYNC_TIMEOUT_S="20", **(env or {})))
    return res, time.monotonic() - t0


_results: dict = {}


def _record(mutant: str, caught: bool, why: str) -> None:
    _results[mutant] = (caught, why)


@pytest.fixture(scope="module")
def plane_build(tmp_path_factory):
    return _PlaneBuild(str(tmp_path_factory.mktemp("mutants")))


# Plane mutants run on the twin's own description (one block per op: the round trip's payload is below its byte floor
# per block) unless named here. On ascend910b4 (no floor) the round trip's 20 tokens give dispatch_send two blocks
# (tiling's block per 16 rows), so ordering between blocks is exercised. CAM_TWIN_DCACHE_ACROSS_LAUNCHES=1 keeps the
# lines a launch left cached for every later one (docs/twin.md, "Scalar data cache"). Each setting has its own
# control run.
TWIN_DEFAULT = (("CAM_TWIN_PLATFORM", "twin"),)
PLANE_ENV = {
    "signal_before_syncall": (("CAM_TWIN_PLATFORM", "ascend910b4"),),
    "stale_line_earlier_launch": (("CAM_TWIN_PLATFORM", "twin"), ("CAM_TWIN_DCACHE_ACROSS_LAUNCHES", "1")),
}


@pytest.fixture(scope="module")
def plane_runs(plane_build):
    """The controls and every plane mutant, built side by side from the shared objects, then run one by one:
    mutant -> {None: the control's run on the mutant's platform, mutant: its run}."""
    exes = {name: plane_build.link((name or "control").lower(), name)
            for name in [None] + [s for s, (kind, _, _) in MUTANTS.items() if kind == "plane"]}
    controls = {env: _run(exes[None], env=dict(env)) for env in {TWIN_DEFAULT, *PLANE_ENV.values()}}
    runs = {}
    for name, exe in exes.items():
        if name is not None:
            env = PLANE_ENV.get(name, TWIN_DEFAULT)
            runs[name] = {None: controls[env], name: _run(exe, env=dict(env))}
    return runs


# op mutant kind -> (its driver in tests/twin/, the kernel sources rebuilt per mutant, under kernels/). The GMM cube
# loop (common/gmm_cube.h) is compiled into W1's and W2's mixed kernels: both are rebuilt.
OP_RUNS = {
    "gmm": ("gmm_fixpipe.cpp", "gmm_swiglu_quant_multi_layer/gmm_swiglu_quant_multi_layer.cpp",
            "gmm_multi_layer/gmm_multi_layer.cpp"),
    "quant": ("quant_rules.cpp", "dynamic_quant/dynamic_quant.cpp"),
}


@pytest.fixture(scope="module")
def op_runs(plane_build, plane_runs):
    """Per op kind: its driver, unmutated and per mutant of that kind, from the plane build's objects (plane_runs
    linked the control data-plane kernels it reuses)."""
    runs = {}
    for kind in OP_RUNS:
        runs[kind] = {}
        for name in [None] + [s for s, (k, _, _) in MUTANTS.items() if k == kind]:
            runs[kind][name] = _run(plane_build.link_op(kind, (kind + "-" + (name or "control")).lower(), name))
    return runs


# hccl mutant -> (driver, its case, what the unmutated build prints in that case). The A3 case is the driver of
# tests/test_ascend_hccl.py; the A2 ones are tests/twin/hccl_window_table.cpp (world40's control: the kernel refuses a
# world of 40 in its status record, kDeviceStatusOutOfRange of kDeviceArgHcclRankDim, 40 outside [0, 33)).
HCCL_CASES = {
    "hccl_no_init_tiling": ("sdk_ascend/hccl_context.cpp", "bound_a3", "OK"),
    "hccl_a2_ranks": ("twin/hccl_window_table.cpp", "world40", "REFUSED 1 3 40 33"),
    "hccl_no_finalize": ("twin/hccl_window_table.cpp", "bound", "OK"),
}


@pytest.fixture(scope="module")
def hccl_runs(tmp_path_factory):
    """Per hccl mutant: (its control's run, its own run) of window_table from its tree, in its case."""
    out = tmp_path_factory.mktemp("mutants-hccl")
    runs = {}

    def build(driver: str, mutant: str | None) -> str:
        name = (os.path.splitext(os.path.basename(driver))[0] + "-" + (mutant or "control")).lower()
        tree = _tree(mutant)
        return build_twin_program(ROOT, str(out / name), os.path.join(ROOT, "tests", driver),
                                  extra_sources=[os.path.join(tree, "kernels", "window_table", "window_table.cpp")],
                                  extra_includes=[os.path.join(tree, "kernels")])

    controls = {}
    for name, (driver, case, _) in HCCL_CASES.items():
        if driver not in controls:
            controls[driver] = build(driver, None)
        runs[name] = (_run(controls[driver], case, env={"CAM_TWIN_PLATFORM": "twin"}),
                        _run(build(driver, name), case, env={"CAM_TWIN_PLATFORM": "twin"}))
    return runs


def _judge(name, res, elapsed, rule, kernel, control_ok):
    text = res.stdout + res.stderr
    if not control_ok:
        return False, "the unmutated build failed the same run"
    if elapsed > 10:
        return False, f"took {elapsed:.1f} s"
    rules = rule if isinstance(rule, tuple) else (rule,)
    if not any(f"rule '{r}' broken" in text for r in rules):
        return False, f"rule {'/'.join(rules)} not named (exit {res.returncode}): {text[-600:]}"
    if kernel and f"in kernel {kernel} " not in text:
        return False, f"rule named, but not in kernel {kernel}: {text[-600:]}"
    return True, ""


def _check_caught(runs, name, control_passed) -> None:
    """The control run must pass (`control_passed(stdout)`), then the mutant's run is judged and recorded."""
    control, _ = runs[None]
    control_ok = control.returncode == 0 and control_passed(control.stdout)
    assert control_ok, "control: " + control.stdout + control.stderr
    res, elapsed = runs[name]
    _, rule, kernel = MUTANTS[name]
    caught, why = _judge(name, res, elapsed, rule, kernel, control_ok)
    _record(name, caught, why)
    assert caught, f"{name}: {why}"


@pytest.mark.parametrize("name", [s for s, v in MUTANTS.items() if v[0] == "plane"])
def test_plane_mutant_is_caught(plane_runs, name):
    _check_caught(plane_runs[name], name, lambda out: "ok" in out)


@pytest.mark.parametrize("name", [s for s, v in MUTANTS.items() if v[0] == "hccl"])
def test_hccl_mutant_is_caught(hccl_runs, name):
    control, mutant = hccl_runs[name]
    expected = HCCL_CASES[name][2]
    _check_caught({None: control, name: mutant}, name, lambda out: out.strip() == expected)


@pytest.mark.parametrize("name", [s for s, v in MUTANTS.items() if v[0] in OP_RUNS])
def test_op_mutant_is_caught(op_runs, name):
    _check_caught(op_runs[MUTANTS[name][0]], name, lambda out: out.strip() == "OK")


@pytest.mark.parametrize("name", [s for s, v in MUTANTS.items() if v[0] == "compile"])
def test_compile_mutant_is_caught(name):
    """The kernel source compiles unmutated, and patched fails with the rule's error at a line the patch added (to
    the kernel or to a header it includes)."""
    _, rule, kernel = MUTANTS[name]
    tree = _tree(name)
    added = _trees[name].added

    def command(root):
        return [_gxx(), *FLAGS, "-fsyntax-only", *_kernel_includes(root), os.path.join(root, "kernels", kernel)]

    control, mutant = run_all([command(ROOT), command(tree)], timeout=300, capture_output=True, text=True)
    assert control.returncode == 0, "control: " + control.stderr[-2000:]
    if rule in ASSERTED_RULES:  # at a line of the kernel holding the assertion
        rel = os.path.join("kernels", kernel)
        with open(os.path.join(tree, rel)) as f:
            asserted = {i for i, line in enumerate(f.read().splitlines(), 1) if ASSERTED_RULES[rule] in line}
        added = {rel: asserted}
    errors = [m for rel, lines in added.items()
              for m in re.finditer(rf"{re.escape(rel)}:(\d+):\d+: error: (.*)", mutant.stderr)
              if int(m.group(1)) in lines]
    caught = mutant.returncode != 0 and any(re.search(COMPILE_RULES[rule], m.group(2)) for m in errors)
    where = ", ".join(f"{rel}:{lines}" for rel, lines in added.items())
    why = "" if caught else f"no {rule} error at the added lines {where} (exit {mutant.returncode}): " \
                            f"{mutant.stderr[-800:]}"
    _record(name, caught, why)
    assert caught, f"{name}: {why}"


@pytest.mark.parametrize("name", [s for s, v in MUTANTS.items() if v[0] == "scan"])
def test_scan_mutant_is_caught(name):
    _, rule, _ = MUTANTS[name]
    assert not scan(ROOT)[rule], "the unmutated kernels already break " + rule
    sites = scan(_tree(name))[rule]
    _record(name, bool(sites), "" if sites else "the scan found nothing")
    assert sites, f"{name}: the {rule} scan missed it"


def _stand_in_build(root: str, work) -> list:
    """The kernels of the tree at `root` built with CAM_ASCEND=ON and tests/test_ascend_build.py's stand-in bisheng
    (which logs each command line): the commands."""
    import test_ascend_build as ab

    home, bindir, log = ab._fake_toolkit(work)
    env = ab._env_without_toolkit()
    env.update(ASCEND_HOME_PATH=str(home), PATH=str(bindir) + os.pathsep + env["PATH"], CAM_BISHENG_LOG=str(log))
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run([shutil.which("cmake"), "-S", root, "-B", str(work / "build"), *generator, "-DCAM_ASCEND=ON",
                    "-DCAM_BUILD_PYTHON=OFF", "-DCMAKE_BUILD_TYPE=Release"], check=True, capture_output=True,
                   timeout=240, env=env)
    subprocess.run([shutil.which("cmake"), "--build", str(work / "build"), "--target", "cam_kernels"], check=True,
                   capture_output=True, timeout=240, env=env)
    import json
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("name", list(BUILD_MUTANTS))
def test_build_mutant_is_caught(tmp_path, name):
    if shutil.which("cc") is None or shutil.which("cmake") is None:
        pytest.skip("cmake and cc are needed for the stand-in Ascend build")
    from test_ascend_build import auto_sync_option

    rule = BUILD_MUTANTS[name]
    src = _tree(name)

    def missing(commands):  # test_ascend_build's check: every kernel's bisheng command carries the option
        return [c[c.index("-c") + 1] for c in commands if auto_sync_option() not in c]

    (tmp_path / "control").mkdir()
    (tmp_path / "mutant").mkdir()
    control = _stand_in_build(ROOT, tmp_path / "control")
    assert control and not missing(control), "control: the tree's own build lacks the option"
    mutant = _stand_in_build(src, tmp_path / "mutant")
    caught = bool(mutant) and bool(missing(mutant))
    _record(name, caught, "" if caught else f"{rule}: every mutated command still carries {auto_sync_option()}")
    assert caught, f"{name}: {rule} not broken"


def test_summary(capsys):
    """Runs last in this module: the suite's summary line."""
    caught = sum(1 for c, _ in _results.values() if c)
    total = len(MUTANTS) + len(BUILD_MUTANTS)
    with capsys.disabled():
        print(f"\nmutants {total}, caught {caught}")
        for name in [*MUTANTS, *BUILD_MUTANTS]:
            if name not in _results or not _results[name][0]:
                print(f"  missed {name}: {_results.get(name, (False, 'not run'))[1]}")
    assert caught == total

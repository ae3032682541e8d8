"""cam-qualify: one command for the day an Ascend machine is available (docs/ascend.md §8).

It builds cam with bisheng, runs every op against its golden on NPU tensors at the shapes that catch layout bugs,
again under msSanitizer memcheck/racecheck when mssanitizer is present, runs a data-plane round trip of many rounds
with payload checksums (ranks as processes, one device each, on the NPU transport), the same round trip again while
every device runs matmuls on a stream of its own (the payload an FFN rank reads once it saw a round's ready word must
have the golden checksum: the cross-device ordering of a round's writes, docs/protocol.md §10.2), and the end-to-end
check, and writes a support-matrix JSON (SoC, CANN, torch_npu versions, each step pass/fail).

``--dry-run`` checks the prerequisites and lists the steps without running them: the very ``Step`` objects the
real mode executes (``plan``), which the tests check. Nothing here has run on hardware yet.

Each step is a subprocess with a timeout. An op step is ``python -m cam.qualify --op NAME --m M --k K --n N``,
which runs one check of ``check_op`` (also usable on the twin with ``--device cpu``).
"""

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import platform as _platform
import shutil
import subprocess
import sys
import time
from typing import Callable, Optional, Sequence

# Rows at and around the 16-row fractal (m = 16), and K / N that are, half and not multiples of the 32-byte int8
# fractal width or the 16-element N granule.
ROWS = (1, 15, 16, 17)
K_VALUES = (256, 272, 273)  # K % 32 in {0, 16, 17}
N_W1 = 104                  # even (act | gate halves), N % 16 = 8
N_W2 = 200                  # N % 16 = 8
OPS = ("dynamic_quant", "gmm_swiglu_quant_multi_layer", "gmm_multi_layer")
SANITIZER_TOOLS = ("memcheck", "racecheck")
DATAPLANE_ROUNDS = 2000
DATAPLANE_LOAD_ROUNDS = 2000  # the ordering step: as many rounds, each device busy with other work meanwhile
STEP_TIMEOUT_S = 1800.0


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    kind: str  # "build", "op", "sanitizer", "dataplane", "e2e"
    argv: tuple
    timeout_s: float = STEP_TIMEOUT_S


@dataclasses.dataclass(frozen=True)
class Environment:
    source: str                # the cam checkout to build
    python: str                # interpreter the steps run with
    mssanitizer: Optional[str]  # path, or None when msSanitizer is absent
    device: str = "npu"


def detect(source: str, device: str = "npu") -> Environment:
    return Environment(source=str(pathlib.Path(source).resolve()), python=sys.executable,
                       mssanitizer=shutil.which("mssanitizer"), device=device)


def _op_argv(env: Environment, op: str, m: int, k: int, n: int) -> tuple:
    return (env.python, "-m", "cam.qualify", "--op", op, "--m", str(m), "--k", str(k), "--n", str(n), "--device",
            env.device)


def plan(env: Environment) -> list:
    """Every step, in order. The real mode runs exactly this list; --dry-run prints it."""
    steps = [Step("build", "build", (env.python, "-m", "pip", "install", "--no-build-isolation", "-C",
                                     "cmake.define.CAM_ASCEND=ON", env.source))]
    op_steps = []
    for op in OPS:
        n = {"dynamic_quant": 0, "gmm_swiglu_quant_multi_layer": N_W1, "gmm_multi_layer": N_W2}[op]
        for m in ROWS:
            for k in K_VALUES:
                op_steps.append(Step(f"{op}[m={m},k={k}" + (f",n={n}]" if n else "]"), "op", _op_argv(env, op, m, k, n)))
    steps += op_steps
    if env.mssanitizer:
        for tool in SANITIZER_TOOLS:
            steps += [Step(f"{tool}:{s.name}", "sanitizer", (env.mssanitizer, f"--tool={tool}", *s.argv))
                      for s in op_steps if "[m=17," in s.name]
    # On NPU: every rank a process with its own device, the windows shared over the NPU transport (ACL IPC).
    steps.append(Step(f"dataplane_round_trip[transport={_dataplane_transport(env.device)}]", "dataplane",
                      (env.python, "-m", "cam.qualify", "--dataplane-rounds", str(DATAPLANE_ROUNDS), "--device",
                       env.device)))
    steps.append(Step(f"dataplane_order_under_load[transport={_dataplane_transport(env.device)}]", "dataplane",
                      (env.python, "-m", "cam.qualify", "--dataplane-rounds", str(DATAPLANE_LOAD_ROUNDS),
                       "--dataplane-load", "--device", env.device)))
    steps.append(Step("e2e_check", "e2e", (env.python, "-m", "cam.run.cli", "--check", "--quiet")))
    return steps


def describe(step: Step) -> str:
    """The --dry-run line of a step (of the list the real mode runs)."""
    return f"  {step.kind:9} {step.name}  $ {' '.join(step.argv)}"


# What marks a cam source checkout (the build step's --source): the build files and the kernels' sources.
CHECKOUT_FILES = ("pyproject.toml", "CMakeLists.txt", "kernels", "host")


def checkout(source: str) -> tuple:
    """(is a cam checkout, detail) for ``--source``: its build files and kernel sources present, the pyproject's
    project named cam."""
    root = pathlib.Path(source)
    absent = [name for name in CHECKOUT_FILES if not (root / name).exists()]
    if absent:
        return False, f"{source} is not a cam checkout (no {', '.join(absent)}): pass --source CHECKOUT"
    try:
        named = 'name = "cam"' in (root / "pyproject.toml").read_text(errors="replace")
    except OSError as e:
        return False, f"{source}/pyproject.toml is unreadable: {e}"
    if not named:
        return False, f"{source} is not a cam checkout (its pyproject.toml names another project)"
    return True, source


def prerequisites(env: Environment) -> list:
    """(what, found, detail) for everything the real mode needs."""
    home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
    source = checkout(env.source)
    try:
        import torch_npu  # noqa: F401

        npu = (True, getattr(torch_npu, "__version__", "?"))
    except ImportError as e:
        npu = (False, str(e))
    return [
        ("cam checkout (--source)", source[0], source[1]),
        ("CANN toolkit (ASCEND_HOME_PATH)", bool(home and os.path.isdir(home)), home or "not set"),
        ("bisheng", shutil.which("bisheng") is not None, shutil.which("bisheng") or "not on PATH"),
        ("torch_npu", npu[0], npu[1]),
        ("npu-smi", shutil.which("npu-smi") is not None, shutil.which("npu-smi") or "not on PATH"),
        ("mssanitizer (optional)", env.mssanitizer is not None, env.mssanitizer or "absent: sanitizer steps skipped"),
    ]


def _cann_version() -> str:
    home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME") or ""
    for name in ("version.info", "ascend_toolkit_install.info"):
        path = pathlib.Path(home) / name
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                if line.lower().startswith("version="):
                    return line.split("=", 1)[1].strip()
    return "unknown"


def _versions() -> dict:
    out = {"cann": _cann_version(), "python": _platform.python_version()}
    try:
        import torch

        out["torch"] = torch.__version__
        import torch_npu

        out["torch_npu"] = getattr(torch_npu, "__version__", "unknown")
    except ImportError:
        out.setdefault("torch_npu", "absent")
    try:
        import cam

        out["cam"] = cam.__version__
        out["backend"] = cam.backend()
        out["soc"] = cam._C.platform()["name"]
    except Exception as e:  # the support matrix records why, it does not stop on it
        out["soc"] = f"unknown ({e})"
    return out


def run_subprocess(step: Step) -> tuple:
    start = time.monotonic()
    try:
        res = subprocess.run(list(step.argv), capture_output=True, text=True, timeout=step.timeout_s)
        ok, detail = res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        ok, detail = False, f"timed out after {step.timeout_s} s"
    return ok, detail, time.monotonic() - start


def execute(steps: Sequence[Step], runner: Callable[[Step], tuple] = run_subprocess, stop_after_build_failure=True):
    """Runs the steps in order with ``runner`` and returns one record per step run."""
    results = []
    for step in steps:
        ok, detail, seconds = runner(step)
        results.append({"name": step.name, "kind": step.kind, "passed": bool(ok), "seconds": round(seconds, 3),
                        "detail": detail})
        if step.kind == "build" and not ok and stop_after_build_failure:
            break
    return results


def support_matrix(results: list) -> dict:
    return {"versions": _versions(), "steps": results, "passed": all(r["passed"] for r in results)}


# ---------------------------------------------------------------- one step's check (runs inside the subprocess)

def _exact(name: str, got, want) -> None:
    import torch

    if not torch.equal(got.cpu(), want.cpu()):
        bad = (got.cpu() != want.cpu()).sum().item()
        raise AssertionError(f"{name}: {bad} elements differ from the golden")


def check_op(op: str, m: int, k: int, n: int, device: str, seed: int = 0) -> None:
    """Runs ``op`` once on ``device`` tensors and compares with its golden under docs/gmm.md §6 / numerics.md.
    Raises AssertionError naming the output that differs."""
    import torch

    import cam
    from cam import reference
    from cam.reference import gmm as gref

    g = torch.Generator().manual_seed(seed)
    dev = torch.device(device)
    if op == "dynamic_quant":
        x = (torch.randn(m, k, generator=g) * 4).to(torch.bfloat16)
        q, scale = cam.ops.dynamic_quant(x.to(dev))
        q_ref, scale_ref = reference.dynamic_quant(x)
        _exact("q", q, torch.as_tensor(q_ref))
        _exact("scale", scale, torch.as_tensor(scale_ref))
        return
    experts = 2
    counts = torch.tensor([m // 2, m - m // 2], dtype=torch.int64)
    layer = torch.tensor([0], dtype=torch.int64)
    w = torch.randint(-127, 128, (experts, k, n), dtype=torch.int8, generator=g)
    ws = torch.rand(experts, n, generator=g) * 0.01
    a = torch.randint(-127, 128, (m, k), dtype=torch.int8, generator=g)
    a_scale = torch.rand(m, generator=g) * 0.01 + 0.001
    nz = [gref.prepack_nz_reference(w).to(dev)]
    args = (a.to(dev), a_scale.to(dev), nz, [ws.to(dev)], counts.to(dev), layer.to(dev), 1)
    if op == "gmm_multi_layer":
        out = torch.zeros(m, n, dtype=torch.bfloat16, device=dev)
        torch.ops.cam.gmm_multi_layer(*args, out)
        _exact("out", out, gref.gmm_multi_layer(a, a_scale, [w], [ws], counts, 0, 1))
        return
    if op == "gmm_swiglu_quant_multi_layer":
        y = torch.zeros(m, n // 2, dtype=torch.int8, device=dev)
        y_scale = torch.zeros(m, dtype=torch.float32, device=dev)
        torch.ops.cam.gmm_swiglu_quant_multi_layer(*args, y, y_scale)
        y_ref, y_scale_ref, _ = gref.gmm_swiglu_quant_multi_layer(a, a_scale, [w], [ws], counts, 0, 1)
        diff = (y.cpu().to(torch.int16) - y_ref.to(torch.int16)).abs()
        # docs/gmm.md §6: the device exp may differ by an ulp or two from the correctly rounded golden.
        if diff.max().item() > 1 or diff.ne(0).float().mean().item() > 1e-3:
            raise AssertionError(f"y: max |diff| {diff.max().item()}, {diff.ne(0).sum().item()} elements differ")
        rel = ((y_scale.cpu() - y_scale_ref).abs() / y_scale_ref.abs().clamp_min(1e-30)).max().item()
        if rel > 1e-6:
            raise AssertionError(f"y_scale: relative error {rel} > 1e-6")
        return
    raise ValueError(f"unknown op {op!r} (one of {', '.join(OPS)})")


# The plane of the round-trip step: two replicas, two FFN ranks, every op on several experts per rank.
DATAPLANE_TOPOLOGY = dict(D=2, P=1, F=2, E=8, K=3, H=96, Bmax=6, L=3, slots=2)
DATAPLANE_TIMEOUT_S = 1200.0  # the whole run's deadline (ranks are joined within it); STEP_TIMEOUT_S bounds the step


def _checksum(t) -> int:
    """Order-sensitive checksum of a tensor's bytes (positions weighted), so a swapped row changes it."""
    import torch

    v = t.contiguous().view(torch.uint8).to(torch.int64).flatten()
    return int(((v + 1) * (torch.arange(v.numel(), dtype=torch.int64) % 65521 + 1)).sum())


def _dataplane_transport(device: str) -> str:
    """The plane the round-trip step runs on: threads of this process for CPU tensors (the twin), processes over
    the NPU transport (ACL IPC device memory, docs/ascend.md §5) for NPU tensors."""
    return "in_process" if device == "cpu" else "npu"


class _DeviceLoad:
    """Other work on ``device`` while the rounds run: matmuls on a stream of their own on NPU (a CPU thread on the
    twin), so the data plane's writes share the chip with other traffic, as on a loaded machine. ``iterations``
    counts the matmuls done (the step reports it: a load that never ran proves nothing)."""

    def __init__(self, device: str):
        import threading

        self.device, self.iterations, self._stop = device, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"qualify-load-{device}")

    def _run(self) -> None:
        import torch

        dev = torch.device(self.device)
        npu = None
        if dev.type == "npu":
            from cam import _npu

            npu = _npu._torch_npu().npu
        a = torch.rand(256, 256, device=dev)
        with npu.stream(npu.Stream(device=dev)) if npu else contextlib.nullcontext():
            while not self._stop.is_set():
                a = torch.mm(a, a).clamp_(0, 1)
                if npu:
                    npu.current_stream().synchronize()  # a bounded queue: the load runs beside the rounds
                self.iterations += 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(60)


def _dataplane_inputs(topo, rounds: int, seed: int) -> list:
    """inputs[r][a] = (x, ids, w) of round r at Attention rank a (the same in every rank's process)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    inputs = []
    for _ in range(rounds):
        row = []
        for _ in range(topo.A):
            b = int(torch.randint(0, topo.Bmax + 1, (1,), generator=g))
            row.append(((torch.randn(b, topo.H, generator=g) * 3).to(torch.bfloat16),
                        torch.randint(-1, topo.E, (b, topo.K), generator=g, dtype=torch.int32),
                        torch.rand(b, topo.K, generator=g)))
        inputs.append(row)
    return inputs


def _expert(topo):
    import torch

    def expert(e, rows, scales):
        v = rows.to(torch.float32) * (scales[:, None] if topo.quantized else 1)
        return (v * (e.to(torch.float32) + 1)[:, None]).to(torch.bfloat16)

    return expert


def _dataplane_rank(comm, topo, inputs, device, received: dict) -> None:
    """One rank's part of the round trip: an Attention rank dispatches and combines every round and checks each
    combine output against the golden; an FFN rank serves every round and records the checksum of what it got in
    ``received[(ffn rank, replica, seq)]``."""
    import torch

    import cam
    from cam.reference.dispatch_combine import round_trip_plane
    from cam.reference.dynamic_quant import dynamic_quant

    dev = torch.device(device)
    expert = _expert(topo)
    rounds = len(inputs)
    if comm.is_attention:
        a = comm.rank
        for r in range(rounds):
            x, ids, w = inputs[r][a]
            cam.ops.dispatch_send(comm, x.to(dev), ids.to(dev), r % topo.L)
            out = cam.ops.combine_recv(comm, ids.to(dev), w.to(dev)).cpu()
            golden = round_trip_plane(topo, inputs[r], expert, quant_fn=dynamic_quant, global_ids=True)["out"][a]
            if not torch.equal(out, golden):
                raise AssertionError(f"round {r}: Attention rank {a}'s combine output differs from the golden "
                                     f"({int((out != golden).sum())} elements)")
        return
    f = comm.rank - topo.A
    served = 0
    while served < topo.D * rounds:
        ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
        out = torch.zeros((topo.recv_rows, topo.H), dtype=torch.bfloat16, device=dev)
        item = cam.WorkItem(wi)
        if item.kind == cam.WorkItem.WORK:
            n = item.rows
            e = torch.repeat_interleave(torch.arange(topo.R), cnt.cpu()) + f * topo.R
            out[:n] = expert(e, ex[:n].cpu(), sc[:n].cpu()).to(dev)
            received[(comm.rank, item.replica, item.seq)] = _checksum(ex[:n].cpu())
            served += 1
        cam.ops.combine_send(comm, out, wi)


def _dataplane_threads(topo, inputs, device, load: bool = False) -> tuple:
    """Every rank a thread of this process on the in-process plane, with one _DeviceLoad beside them when ``load``;
    the FFN ranks' received checksums and the load's matmul count."""
    import threading

    import cam

    received, failures = {}, []
    group = f"qualify-{os.getpid()}-{time.monotonic_ns()}"

    def rank_main(rank):
        comm = None
        try:
            comm = cam.Comm(topo, rank, transport="in_process", group=group)
            _dataplane_rank(comm, topo, inputs, device, received)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append((rank, e))
            if comm is not None:
                comm.abort()  # the other ranks' waits end now instead of at their timeout
        finally:
            if comm is not None:
                comm.close()

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True, name=f"qualify-rank{r}")
               for r in range(topo.world_size)]
    with _DeviceLoad(device) if load else contextlib.nullcontext() as busy:
        for th in threads:
            th.start()
        deadline = time.monotonic() + DATAPLANE_TIMEOUT_S
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
    if any(th.is_alive() for th in threads):
        raise AssertionError(f"data-plane round trip: ranks still running after {DATAPLANE_TIMEOUT_S} s")
    if failures:
        rank, e = failures[0]  # the first to fail; the others were aborted by it
        raise AssertionError(f"data-plane round trip: rank {rank} failed: {e}") from e
    return received, busy.iterations if load else 0


def _dataplane_processes(topo, rounds: int, device: str, seed: int, load: bool = False) -> tuple:
    """Every rank a process (``python -m cam.qualify --dataplane-rank R``) on the NPU transport, its pids and window
    records exchanged through a FileStore; the FFN ranks' received checksums. Each rank is bounded by
    DATAPLANE_TIMEOUT_S; on a failure or timeout every rank is ended and the first failure is named."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cam-qualify-") as tmp:
        procs = []
        for r in range(topo.world_size):
            out = os.path.join(tmp, f"rank{r}.json")
            argv = [sys.executable, "-m", "cam.qualify", "--dataplane-rank", str(r), "--dataplane-store",
                    os.path.join(tmp, "store"), "--dataplane-rounds", str(rounds), "--device", device, "--seed",
                    str(seed), "--json", out] + (["--dataplane-load"] if load else [])
            procs.append((subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), out))
        deadline = time.monotonic() + DATAPLANE_TIMEOUT_S
        logs, failed = [], None
        try:
            for r, (p, _) in enumerate(procs):
                try:
                    logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
                except subprocess.TimeoutExpired:
                    raise AssertionError(f"data-plane round trip: rank {r} still running after "
                                         f"{DATAPLANE_TIMEOUT_S} s") from None
                if p.returncode != 0 and failed is None:
                    failed = r
        finally:
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(30)
        if failed is not None:
            raise AssertionError(f"data-plane round trip: rank {failed} failed (exit {procs[failed][0].returncode}):"
                                 f"\n{logs[failed][-2000:]}")
        received, iterations = {}, 0
        for _, out in procs:
            with open(out) as f:
                record = json.load(f)
            for rank, d, seq, checksum in record["received"]:
                received[(rank, d, seq)] = checksum
            iterations += record.get("load_iterations", 0)
        return received, iterations


def dataplane_rank_main(rank: int, store_path: str, rounds: int, device: str, seed: int, out: str,
                        load: bool = False) -> None:
    """One rank of the processes' round trip (inside its subprocess): its device (rank modulo the devices
    torch_npu sees), its Comm on the NPU transport, its part of the rounds; writes the checksums it received."""
    from torch.distributed import FileStore

    import cam

    topo = cam.Topology(**DATAPLANE_TOPOLOGY)
    from cam import _npu

    npu = _npu._torch_npu()
    index = rank % max(1, int(npu.npu.device_count()))
    npu.npu.set_device(index)
    store = FileStore(store_path, topo.world_size)
    received = {}
    with _DeviceLoad(f"{device}:{index}") if load else contextlib.nullcontext() as busy, \
            cam.Comm(topo, rank, transport=_dataplane_transport(device), store=store, group="qualify",
                     join_timeout_s=120) as comm:
        _dataplane_rank(comm, topo, _dataplane_inputs(topo, rounds, seed), f"{device}:{index}", received)
    with open(out, "w") as f:
        json.dump({"received": [[*k, v] for k, v in received.items()],
                   "load_iterations": busy.iterations if load else 0}, f)


def check_dataplane(rounds: int, device: str, seed: int = 0, load: bool = False) -> str:
    """A data-plane round trip of ``rounds`` rounds on ``device`` tensors: every Attention rank dispatches and
    combines each round, every FFN rank applies a per-expert function that exposes routing mistakes. Each round's
    combine output must equal the golden (reference round trip) exactly, and the checksum of every payload an FFN
    rank received must equal the checksum of the golden dispatch. On CPU the ranks are threads of this process; on
    NPU they are processes on the NPU transport (one device each). Raises AssertionError naming the round and rank
    that differ; returns the plane it ran on. With ``load`` every device also runs matmuls on a stream of its own
    meanwhile (_DeviceLoad): an FFN rank reads a payload once it saw the round's ready word, so a checksum that
    differs then is a round whose writes were not all visible when its ready word was (docs/protocol.md §10.2)."""
    import cam
    from cam.reference.dispatch_combine import round_trip_plane
    from cam.reference.dynamic_quant import dynamic_quant

    transport = _dataplane_transport(device)
    topo = cam.Topology(**DATAPLANE_TOPOLOGY)
    if transport == "npu":
        from cam import _npu

        if _npu._torch_npu() is None:
            raise RuntimeError(f"data-plane round trip on {device}: needs torch_npu (NPU tensors and one device per "
                               f"rank process)")
        received, iterations = _dataplane_processes(topo, rounds, device, seed, load)
    else:
        received, iterations = _dataplane_threads(topo, _dataplane_inputs(topo, rounds, seed), device, load)
    if load and iterations == 0:
        raise AssertionError("data-plane round trip under load: the load never ran a matmul")
    inputs = _dataplane_inputs(topo, rounds, seed)
    expert = _expert(topo)
    for r in range(rounds):
        golden = round_trip_plane(topo, inputs[r], expert, quant_fn=dynamic_quant, global_ids=True)["dispatch"]
        for (d, rank), gd in golden.items():
            if received.get((rank, d, r + 1)) != _checksum(gd["rows"]):
                raise AssertionError(f"round {r}: the payload FFN rank {rank} received from replica {d} has the "
                                     "wrong checksum (read after the round's ready word" +
                                     (", under load: the round's writes were not all visible when its ready word "
                                      "was, docs/protocol.md §10.2)" if load else ")"))
    where = "threads as ranks" if transport == "in_process" else "processes as ranks"
    return f"transport {transport}, {topo.world_size} {where}" + (f", load {iterations} matmuls" if load else "")


# ---------------------------------------------------------------- CLI

# The AFD plugin's two published CAMAsyncAFDConnector recipes (docs/integrations.md, "vLLM AFD plugin"), as cam
# topologies: attn_ranks_per_dp is P, the Attention ranks over it D, max_num_batched_tokens Bmax, the FFN ranks F;
# both ship W8A8 checkpoints. DeepSeek-V3.2 (recipe/npu/CAMAsyncAFDConnector/deepseek_v3_2/README.md at the pinned
# commit): AFD DP3 PCP8 + EP8, MBT 140000, the model cut to 10 layers (7 MoE). DeepSeek-V4-Flash (the plugin's
# deploy-dsv4-flash-async skill, its default "legacy" layout): Attention DP2 TP4, FFN DP8/EP8, MBT 8192, 43 MoE layers.
PLUGIN_RECIPES = {
    "deepseek-v3.2 (DP3 PCP8 + EP8, MBT 140000, 7 MoE layers)":
        (dict(D=3, P=8, F=8, E=256, K=8, H=7168, Bmax=140000, L=7), 2048),
    "deepseek-v4-flash (DP2 TP4 + EP8, MBT 8192, 43 MoE layers)":
        (dict(D=2, P=4, F=8, E=256, K=6, H=4096, Bmax=8192, L=43), 2048),
}


def plugin_plans(window_tokens: Optional[int] = None, weight_format: str = "w8a8") -> list:
    """``[(recipe, cam.MemoryPlan)]`` of :data:`PLUGIN_RECIPES` (``window_tokens``: the topology's, None = Bmax)."""
    from .memory import plan_memory
    from .topology import Topology

    return [(name, plan_memory(Topology(**dims, window_tokens=window_tokens), weight_format, intermediate=i))
            for name, (dims, i) in PLUGIN_RECIPES.items()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cam-qualify", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="check prerequisites and list the steps; run nothing")
    p.add_argument("--plan", action="store_true", help="print cam's memory per rank (cam.plan_memory) for the vLLM "
                   "AFD plugin's two published recipes and exit; runs nothing on a device")
    p.add_argument("--window-tokens", type=int, default=None, help="with --plan: the topologies' window_tokens "
                   "(default: Bmax, one window round per layer)")
    p.add_argument("--source", default=".", help="the cam checkout to build (default: the current directory)")
    p.add_argument("--json", default="cam-support-matrix.json", help="where the support matrix goes")
    p.add_argument("--device", default="npu", help=argparse.SUPPRESS)
    p.add_argument("--op", choices=OPS, help=argparse.SUPPRESS)
    p.add_argument("--m", type=int, help=argparse.SUPPRESS)
    p.add_argument("--k", type=int, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--dataplane-rounds", type=int, help=argparse.SUPPRESS)
    p.add_argument("--dataplane-rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--dataplane-store", help=argparse.SUPPRESS)
    p.add_argument("--dataplane-load", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p


def main(argv: Optional[Sequence[str]] = None, runner: Callable[[Step], tuple] = run_subprocess) -> int:
    args = _parser().parse_args(argv)
    if args.window_tokens is not None and not args.plan:
        print("cam-qualify: --window-tokens needs --plan", file=sys.stderr)
        return 2
    if args.plan:
        try:
            plans = plugin_plans(args.window_tokens)
        except ValueError as e:
            print(f"cam-qualify --plan: {e}", file=sys.stderr)
            return 2
        for recipe, memory in plans:
            print(f"{recipe}\n{memory}")
        return 0
    if args.op:  # one op step, inside its subprocess
        check_op(args.op, args.m, args.k, args.n, args.device)
        print(f"{args.op} m={args.m} k={args.k} n={args.n}: ok")
        return 0
    if args.dataplane_rank is not None:  # one rank of the processes' round trip, inside its subprocess
        dataplane_rank_main(args.dataplane_rank, args.dataplane_store, args.dataplane_rounds, args.device, args.seed,
                            args.json, args.dataplane_load)
        return 0
    if args.dataplane_rounds is not None:
        plane = check_dataplane(args.dataplane_rounds, args.device, args.seed, args.dataplane_load)
        what = "data-plane round trip under load" if args.dataplane_load else "data-plane round trip"
        print(f"{what}: {args.dataplane_rounds} rounds on {args.device} ({plane}): ok")
        return 0
    env = detect(args.source, args.device)
    steps = plan(env)
    prereqs = prerequisites(env)
    for what, found, detail in prereqs:
        print(f"{'ok     ' if found else 'MISSING'} {what}: {detail}")
    if args.dry_run:
        print(f"{len(steps)} steps:")
        for s in steps:
            print(describe(s))
        return 0
    missing = [what for what, found, _ in prereqs if not found and "optional" not in what]
    if missing:
        print("cam-qualify: missing " + ", ".join(missing) + " (see --dry-run)", file=sys.stderr)
        return 2
    matrix = support_matrix(execute(steps, runner))
    pathlib.Path(args.json).write_text(json.dumps(matrix, indent=2))
    print(f"support matrix: {args.json} ({'all passed' if matrix['passed'] else 'FAILURES'})")
    return 0 if matrix["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

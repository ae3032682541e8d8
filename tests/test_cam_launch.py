"""cam-launch (cam/serve/launch.py) as a supervisor, without an engine installed: the store, the cam-ffn ranks and
stand-in engine commands; one failing process, or Ctrl-C, stops every process; each line of output names its
process. The vLLM deployment itself is the vLLM tier's (tests/engines/test_vllm_launch.py)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from test_ffn_server import _experts, _write_checkpoint

WAIT_S = 120.0


def _launch(tmp_path, engine, *extra):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    _write_checkpoint(ckpt, _experts())
    return subprocess.Popen([sys.executable, "-m", "cam.serve.launch", "--checkpoint", str(ckpt), "-D", "1", "-F",
                             "2", "--max-tokens", "10", "--group", "launch-test", "--timeout", "60", "--grace", "5",
                             "--engine", engine, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, stdin=subprocess.DEVNULL)


def _pids(out, what):
    line = next(ln for ln in out.splitlines() if ln.startswith(f"cam-launch: started {what}"))
    return [int(p) for p in re.search(r"pids ([\d ]+)", line).group(1).split()]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of an exited child is not alive
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_failing_engine_stops_every_process_and_is_named(tmp_path):
    p = _launch(tmp_path, f"{sys.executable} -c \"import time; print('engine up', flush=True); time.sleep(2); "
                          f"raise SystemExit(3)\"")
    out, _ = p.communicate(timeout=WAIT_S)
    assert p.returncode == 1, out
    assert "[engine 0] engine up" in out
    assert "cam-launch: engine 0 exited with status 3: stopping every process" in out
    for pid in _pids(out, "cam-ffn"):
        assert not _alive(pid), f"cam-ffn pid {pid} outlived cam-launch:\n{out}"


def test_ctrl_c_stops_every_process(tmp_path):
    p = _launch(tmp_path, f"{sys.executable} -c \"import time; time.sleep(600)\"")
    lines = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        lines.append(line)
        if line.startswith("cam-launch: started engine"):
            break
    p.send_signal(signal.SIGINT)
    rest, _ = p.communicate(timeout=WAIT_S)
    out = "".join(lines) + rest
    assert p.returncode == 130, out
    assert "cam-launch: SIGINT: stopping every process" in out
    for pid in _pids(out, "cam-ffn") + _pids(out, "engine"):
        assert not _alive(pid), f"pid {pid} outlived cam-launch:\n{out}"


def test_a_config_file_with_an_unknown_option_is_refused_by_name(tmp_path):
    cfg = tmp_path / "launch.json"
    cfg.write_text(json.dumps({"replicas": 2, "ffn-rnaks": 2}))
    p = _launch(tmp_path, "true", "--config", str(cfg))
    out, _ = p.communicate(timeout=WAIT_S)
    assert p.returncode == 2 and "unknown option 'ffn-rnaks'" in out, out


def test_the_stop_after_the_engines_exit_is_addressed_to_the_agreed_world():
    # The launcher has no Comm: it reads the world the ranks agreed from the store and signs its shutdown for that
    # world, which an FFN rank of the world accepts. Before any world is agreed there is nothing to address.
    from torch.distributed import HashStore

    import cam.world
    from cam.serve.launch import _ask_ffn_ranks_to_stop
    from cam.serve.store import SignedStore, shutdown_message

    group = "launch-stop"
    store = SignedStore(HashStore(), os.urandom(16), group)
    assert not _ask_ffn_ranks_to_stop(store, group)
    world = cam.world.join(store, group, 1, 3, 10)
    assert _ask_ffn_ranks_to_stop(store, group)
    assert shutdown_message(store, group, 1, world=world).reason == "cam-launch: engines exited"

"""A twin rule broken by one rank's data-plane kernel aborts the plane at once and leaves the rule's name beside every
rank's abort word (kernels/common/launch.h TwinAbortPlane / TwinAbortReason), whether the kernel body broke it or
the block's end-of-kernel checks did (before, only the body's rules raised the abort: a block-end rule such as
dcache-dirty-at-exit left the peers to their timeout). tests/twin/abort_reason.cpp runs rank 0's kernel while a
thread standing for rank 1 waits on its own abort word, bounded by 10 s."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from _twin_build import build_twin_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_twin_program(ROOT, str(tmp_path_factory.mktemp("abort-reason") / "abort_reason"), "abort_reason.cpp",
                              extra_includes=[os.path.join(ROOT, "kernels")])


def _run(program, case):
    res = subprocess.run([program, case], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    rank0 = re.search(r"^rank0: (.*)$", res.stdout, re.M).group(1)
    m = re.search(r"^rank1: abort (-?\d+) after (\d+) ms: (.*)$", res.stdout, re.M)
    return rank0, int(m.group(1)), int(m.group(2)), m.group(3)


def _expected_reason(rule: str, kernel: str, rank: int, violation: str) -> str:
    """The slot's text as specified (kernels/common/launch.h): rule, kernel and rank, then the block and the call site
    (file name and line) each if the whole stays within the slot's 191 characters (192 bytes with the NUL)."""
    m = re.search(r" block (\d+/\d+) at (?:[^ :]*/)?([^ /:]+:\d+): ", violation)
    text = f"{rule} in {kernel} on rank {rank}"
    for more in (f" block {m.group(1)}", f" at {m.group(2)}"):
        if len(text) + len(more) <= REASON_BYTES - 1:
            text += more
    return text


@pytest.mark.parametrize("case, rule", [("dirty_exit", "dcache-dirty-at-exit"), ("peer_store", "peer-scalar-store")])
def test_violation_aborts_the_peer_naming_the_rule(program, case, rule):
    rank0, abort, waited_ms, reason = _run(program, case)
    assert f"rule '{rule}' broken in kernel store_word" in rank0, rank0
    assert abort == 1, (abort, reason)  # raised by rank 0 (1 + rank)
    assert reason == _expected_reason(rule, "store_word", 0, rank0), (reason, rank0)
    assert reason.startswith(f"{rule} in store_word on rank 0 block 0/1"), reason  # these names leave room for it
    # The peer's wait is bounded by 10 s: ending well before it means the abort, not the bound, ended it (a loaded
    # machine can delay the launch by seconds, never by the whole bound).
    assert waited_ms < 8000, waited_ms


# The longest names cam's kernels and rules have: every part must reach the peers for them.
_LONGEST = ("twin: rule 'dcache-dirty-at-exit' broken in kernel cam_gmm_swiglu_quant_multi_layer block 47/48 at "
            "kernels/gmm_swiglu_quant_multi_layer/gmm_swiglu_quant_multi_layer.cpp:1234: a scalar GM store")


@pytest.mark.parametrize("violation, rank, parts", [
    ("twin: rule 'pipe-order' broken in kernel k block 2/4 at kernels/common/dataplane.h:310: MTE2 read of ...", 3,
     2),
    ("twin: rule 'dcache-dirty-at-exit' broken in kernel cam_dispatch_send block 47/48 at "
     "kernels/dispatch_send/dispatch_send.cpp:1234: a scalar GM store", 12, 2),
    (_LONGEST, 1023, 2),
    # names no cam kernel has: the block still fits, the call site does not
    (_LONGEST.replace("cam_gmm_swiglu_quant_multi_layer", "k" * 130), 1, 1),
    # nor the block: the first part alone
    (_LONGEST.replace("cam_gmm_swiglu_quant_multi_layer", "k" * 150), 1, 0),
])
def test_reason_text_keeps_what_fits(program, violation, rank, parts):
    res = subprocess.run([program, "format", violation, str(rank)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    rule = re.search(r"rule '([^']+)'", violation).group(1)
    kernel = re.search(r" in kernel (\S+) ", violation).group(1)
    text = res.stdout.rstrip("\n")
    assert text == _expected_reason(rule, kernel, rank, violation), text
    assert len(text) <= REASON_BYTES - 1, text
    assert (" block " in text) + (" at " in text) == parts, text


def test_control_leaves_the_plane_alone(program):
    rank0, abort, _, reason = _run(program, "clean")
    assert rank0 == "OK" and abort == 0 and reason == "", (rank0, abort, reason)


# ---- the host quotes the reason: every rank's op error names the rule and the rank that broke it ----
# A real violation needs a broken kernel (tests/test_mutants.py builds those); here the reason is written into a
# non-violating rank's window exactly as TwinAbortPlane writes it (abort word 1 + violator, reason beside it), and
# that rank's next op must quote it. Offsets are the window layout's (kernels/common/window_layout.h kAbortOff,
# kAbortReasonOff, kAbortReasonBytes), written here independently of the code under test.
ABORT_OFF, REASON_OFF, REASON_BYTES, STATUS_OFF = 0, 256, 192, 64

T = dict(D=1, P=2, F=2, E=4, K=2, H=32, Bmax=4, L=2, slots=1)


@pytest.fixture
def comms():
    import threading

    import cam
    from _dataplane_harness import unique_group

    t = cam.Topology(**T)
    group, out, errors = unique_group("abort-reason"), {}, {}
    ready = threading.Barrier(t.world_size + 1, timeout=60)
    release = threading.Event()

    def main(r):
        try:
            with cam.Comm(t, r, group=group) as c:
                out[r] = c
                ready.wait()
                release.wait(120)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors[r] = e
            ready.abort()

    threads = [threading.Thread(target=main, args=(r,), daemon=True) for r in range(t.world_size)]
    for th in threads:
        th.start()
    try:
        ready.wait()
        yield t, out
    finally:
        release.set()
        for th in threads:
            th.join(60)
    assert not errors, errors


def _raise_abort(comm, violator: int, reason: bytes) -> None:
    import torch

    w = comm.window
    w[REASON_OFF:REASON_OFF + REASON_BYTES] = 0
    if reason:
        w[REASON_OFF:REASON_OFF + len(reason)] = torch.frombuffer(bytearray(reason), dtype=torch.uint8)
    w[ABORT_OFF:ABORT_OFF + 8].view(torch.int64)[0] = 1 + violator


def _op_error(t, comm) -> str:
    import torch

    import cam

    x = torch.zeros((t.Bmax - 1, t.H), dtype=torch.bfloat16)
    ids = torch.zeros((t.Bmax - 1, t.K), dtype=torch.int32)
    with pytest.raises(cam.CommAbortedError) as e:
        cam.ops.dispatch_send(comm, x, ids, 0)
    return str(e.value)


def test_peer_error_names_the_rule_and_the_violating_rank(comms):
    t, c = comms
    _raise_abort(c[0], 1, b"peer-scalar-store in dispatch_send on rank 1\0")
    msg = _op_error(t, c[0])
    assert "aborted by rank 1" in msg, msg
    assert ": twin rule peer-scalar-store in dispatch_send on rank 1 [status" in msg, msg


def test_abort_without_a_twin_reason_names_no_rule(comms):
    t, c = comms
    _raise_abort(c[0], 1, b"")
    msg = _op_error(t, c[0])
    assert "aborted by rank 1" in msg and "twin rule" not in msg, msg


def test_tampered_reason_is_bounded_and_printable(comms):
    import torch

    t, c = comms
    # No NUL anywhere in the slot, every byte value but 0 in it, and printable bytes right after it: a reader that
    # trusted a terminator or printed raw bytes would show them.
    garbage = bytes((i * 37) % 255 + 1 for i in range(REASON_BYTES))
    _raise_abort(c[0], 1, garbage)
    c[0].window[STATUS_OFF:STATUS_OFF + 8] = torch.frombuffer(bytearray(b"ZZZZZZZZ"), dtype=torch.uint8)
    msg = _op_error(t, c[0])
    c[0].window[STATUS_OFF:STATUS_OFF + 8] = 0
    assert msg.isprintable(), repr(msg)
    quoted = msg.split(": twin rule ", 1)[1].rsplit(" [status ", 1)[0]  # cam appends the C status
    assert len(quoted) == REASON_BYTES, (len(quoted), quoted)
    want = "".join(chr(b) if 0x20 <= b < 0x7f else "?" for b in garbage)
    assert quoted == want, (quoted, want)

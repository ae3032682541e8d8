"""cam.Topology validation, the tests' layout mirror of window_layout.h, and the dispatch/combine golden."""

from __future__ import annotations

import importlib
import itertools
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
import torch

from cam.reference.dispatch_combine import combine, dispatch, round_trip
from _window_layout import ALIGN, CONTROL_BYTES, LINE, WindowLayout
from cam import Topology
from _topology import topology_with

ROOT = pathlib.Path(__file__).resolve().parents[1]

BASE = dict(D=2, P=2, F=2, E=8, K=2, H=64, Bmax=16, L=3)


topo = topology_with(**BASE)


def _quant():
    # the shared per-token quant golden (docs/numerics.md), imported late like the golden does
    return importlib.import_module("cam.reference.dynamic_quant").dynamic_quant


# ----------------------------------------------------------------------------- Topology validation


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(D=0), "D"),
        (dict(P=0), "P"),
        (dict(F=0), "F"),
        (dict(E=7), "E"),  # 7 % 2 != 0
        (dict(E=0), "E"),
        (dict(K=0), "K"),
        (dict(K=9), "K"),  # K > E
        (dict(H=0), "H"),
        (dict(Bmax=0), "Bmax"),
        (dict(Bmax=1 << 20, K=4096, E=4096), "Bmax"),  # Bmax*K beyond int32
        (dict(L=0), "L"),
        (dict(slots=0), "slots"),
        (dict(act_dtype_bytes=4), "act_dtype_bytes"),
        (dict(quantized=2), "quantized"),
        (dict(capacity=0), "capacity"),
        (dict(window_tokens=-1), "window_tokens"),
        (dict(E=7, expert_slots=3), "expert_slots"),  # 2 ranks of 3 slots for 7 experts
        (dict(expert_slots=-1), "expert_slots"),
        (dict(expert_slots=1 << 20), "expert_slots"),  # F * expert_slots beyond 2**20
        (dict(D=2.0), "D"),
        (dict(H=True), "H"),
    ],
)
def test_topology_rejects_bad_field(kw, field):
    with pytest.raises(ValueError, match=rf"Topology\.{field}\b"):
        topo(**kw)


def test_topology_rejects_oversized_window():
    with pytest.raises(ValueError, match="larger than 2\\*\\*56"):
        topo(D=1 << 20, P=1 << 10, H=1 << 20, Bmax=1 << 20, K=1, E=8)


def test_topology_derived_fields():
    t = topo()
    assert (t.A, t.R, t.world_size) == (4, 4, 6)
    assert t.capacity == t.worst_case_rows == 2 * 16 * 2
    assert t.recv_rows == t.worst_case_rows
    assert [t.ffn_rank_of_expert(e) for e in range(8)] == [4, 4, 4, 4, 5, 5, 5, 5]
    assert t.replica_of(3) == 1 and t.participant_of(3) == 1 and t.attn_rank_of(1, 1) == 3
    # a capacity above the worst case is legal and behaves like the worst case
    big = WindowLayout(topo(capacity=10_000))
    assert big.recv_rows == big.worst_case_rows
    assert big.region_token_slots == 16 and big.region_index_entries == 32
    # capacity is the FFN working set only: the windows hold a whole round whatever it is
    small = WindowLayout(topo(capacity=5))
    assert small.recv_rows == 5 and small.region_token_slots == 16 and small.region_index_entries == 32
    assert small.ffn_window_bytes == t.ffn_window_bytes and small.max_chunks_per_round == 2 * 13
    # window_tokens sizes the windows (default Bmax; above Bmax it behaves like Bmax)
    assert t.window_tokens == 16 and WindowLayout(topo(window_tokens=99)).ffn_window_bytes == t.ffn_window_bytes
    assert topo(window_tokens=0).window_tokens == 16  # 0 is Bmax, as in the C POD
    assert topo(window_tokens=99).fingerprint == t.fingerprint  # the effective bound is what the plane agrees on
    win = WindowLayout(topo(window_tokens=5))
    assert win.region_token_slots == 5 and win.region_index_entries == 10 and win.capacity == 2 * 5 * 2
    assert win.ffn_window_bytes < t.ffn_window_bytes and win.attn_window_bytes == t.attn_window_bytes
    with pytest.raises(Exception):
        t.D = 3  # frozen


def test_fingerprint_is_stable_and_sensitive():
    t = topo()
    assert t.fingerprint == topo().fingerprint
    assert 0 <= t.fingerprint < 2**63
    seen = {t.fingerprint}
    for kw in (dict(D=3), dict(P=1), dict(F=4), dict(E=16), dict(K=3), dict(H=65), dict(Bmax=17), dict(L=4),
               dict(slots=1), dict(quantized=False), dict(capacity=7), dict(window_tokens=5), dict(expert_slots=5),
               dict(E=7, expert_slots=4)):
        fp = topo(**kw).fingerprint
        assert fp not in seen, kw
        seen.add(fp)
    # expert_slots = E / F is the contiguous default: one plane with 0, hashed as before the field existed
    assert topo(expert_slots=4).fingerprint == t.fingerprint and topo(expert_slots=4).R == t.R == 4


# ----------------------------------------------------------------------------- layout self-consistency

LAYOUT_TOPOLOGIES = [WindowLayout(t) for t in [
    topo(),
    topo(quantized=False),
    topo(D=1, P=1, F=1, E=1, K=1, H=1, Bmax=1, L=1, slots=1),
    topo(D=3, P=2, F=4, E=16, K=3, H=129, Bmax=7, L=2, slots=3, capacity=11),
    topo(D=4, P=1, F=3, E=9, K=9, H=7168 // 64, Bmax=33, quantized=False, capacity=1),
    topo(D=2, P=2, F=2, E=4, K=2, H=40, Bmax=9, capacity=3, window_tokens=4),
    topo(D=1, P=1, F=8, E=60, K=4, H=32, Bmax=8, L=2, expert_slots=8),
]]


def _intervals_disjoint(intervals):
    intervals = sorted(intervals)
    for (a0, a1), (b0, b1) in zip(intervals, intervals[1:]):
        assert a1 <= b0, ((a0, a1), (b0, b1))


@pytest.mark.parametrize("t", LAYOUT_TOPOLOGIES, ids=lambda t: f"D{t.D}P{t.P}F{t.F}E{t.E}K{t.K}q{t.quant}")
def test_ffn_window_layout_is_disjoint_and_aligned(t):
    assert t.region_bytes % LINE == 0
    for off in (t.region_index_off, t.region_tokens_off, t.region_scales_off, t.dispatch_row_bytes):
        assert off % ALIGN == 0
    assert t.header_bytes >= 8 * (9 + t.R)
    assert t.index_bytes >= 8 * t.region_index_entries
    assert t.tokens_bytes >= t.region_token_slots * t.H * t.dispatch_elem_bytes
    pieces_state = [(t.ffn_state_off, t.ffn_state_off + 16), (t.ffn_done_seq_off, t.ffn_done_seq_off + 8 * t.D),
                    (t.ffn_combined_seq_off, t.ffn_combined_seq_off + 8 * t.D),
                    (t.ffn_fence_off, t.ffn_fence_off + 8 * t.D),
                    (t.ffn_chunk_cursor_off, t.ffn_chunk_cursor_off + 8 * t.D),
                    (t.ffn_combined_rows_off, t.ffn_combined_rows_off + 8 * t.D),
                    (t.ffn_weights_epoch_off, t.ffn_weights_epoch_off + LINE)]
    _intervals_disjoint(pieces_state)
    assert pieces_state[-1][1] <= t.ffn_ready_off
    signals = [(t.ffn_ready_signal_off(a, s), t.ffn_ready_signal_off(a, s) + LINE)
               for a in range(t.A) for s in range(t.slots)]
    regions = [(t.ffn_region_off(a, s), t.ffn_region_off(a, s) + t.region_bytes)
               for a in range(t.A) for s in range(t.slots)]
    _intervals_disjoint([(0, CONTROL_BYTES), (t.ffn_state_off, t.ffn_ready_off)] + signals + regions)
    assert all(lo % LINE == 0 for lo, _ in signals + regions)
    assert max(hi for _, hi in regions) == t.ffn_window_bytes
    assert t.rank_window_bytes(t.A) == t.ffn_window_bytes


@pytest.mark.parametrize("t", LAYOUT_TOPOLOGIES, ids=lambda t: f"D{t.D}P{t.P}F{t.F}E{t.E}K{t.K}q{t.quant}")
def test_attention_window_layout_is_disjoint_and_aligned(t):
    lines = [(t.attn_send_count_off, t.attn_send_count_off + LINE), (t.attn_recv_count_off, t.attn_recv_count_off + LINE)]
    lines += [(t.attn_slot_state_off(s), t.attn_slot_state_off(s) + LINE) for s in range(t.slots)]
    lines += [(t.attn_completion_signal_off(s, f), t.attn_completion_signal_off(s, f) + LINE)
              for s in range(t.slots) for f in range(t.F)]
    rows = [(t.attn_combine_row_off(s, tk), t.attn_combine_row_off(s, tk) + t.combine_row_bytes)
            for s in range(t.slots) for tk in range(t.Bmax * t.K)]
    _intervals_disjoint([(0, CONTROL_BYTES)] + lines + rows)
    assert all(lo % LINE == 0 for lo, _ in lines) and all(lo % ALIGN == 0 for lo, _ in rows)
    assert max(hi for _, hi in rows) == t.attn_window_bytes
    assert t.window_bytes == max(t.attn_window_bytes, t.ffn_window_bytes)
    assert t.rank_window_bytes(0) == t.attn_window_bytes


def test_work_item_cells_are_distinct():
    t = WindowLayout(topo(D=3, P=3, F=2, E=6, K=2))
    idx = [t.work_item_cell_out_off(j, p) for j in range(t.R) for p in range(t.P)]
    idx += [t.work_item_cell_count(j, p) for j in range(t.R) for p in range(t.P)]
    idx += [t.work_item_cell_src_off(j, p) for j in range(t.R) for p in range(t.P)]
    assert len(set(idx)) == len(idx) == 3 * t.R * t.P
    assert min(idx) == 8 + t.R and max(idx) < t.work_item_chunk_off and t.work_item_words % 4 == 0
    assert t.work_item_chunk_off + 2 <= t.work_item_words


# ----------------------------------------------------------------------------- C++ header mirror

_CPP_QUANTITIES = [
    "attention_ranks", "experts_per_ffn", "world_size", "worst_case_rows", "recv_rows", "region_token_slots",
    "region_index_entries", "dispatch_row_bytes", "combine_row_bytes", "header_words", "header_bytes",
    "index_bytes", "tokens_bytes", "scales_bytes", "region_index_off", "region_tokens_off", "region_scales_off",
    "seals_bytes", "region_seals_off", "region_tables_seal_off", "region_bytes", "ffn_state_off", "ffn_done_seq_off",
    "ffn_combined_seq_off", "ffn_fence_off", "ffn_chunk_cursor_off",
    "ffn_combined_rows_off", "ffn_weights_epoch_off", "ffn_state_bytes", "ffn_ready_off", "window_token_slots",
    "max_chunks_per_round", "placement_width", "placement_words",
    "work_item_chunk_off",
    "ffn_data_off", "ffn_window_bytes", "attn_state_off", "attn_send_count_off", "attn_recv_count_off",
    "attn_state_bytes", "attn_completion_off", "attn_seals_off", "attn_seals_bytes", "attn_combine_off",
    "attn_combine_slot_bytes", "attn_window_bytes",
    "window_bytes", "work_item_words", "fingerprint", "check_topology",
]
_PY_NAME = {"attention_ranks": "A", "experts_per_ffn": "R"}


def _py_value(t: Topology, name: str) -> int:
    if name == "check_topology":
        return 0
    return int(getattr(t, _PY_NAME.get(name, name)))


@pytest.mark.slow
def test_python_mirror_matches_window_layout_header(tmp_path):
    """Compile the header with g++ and compare every size and offset with the Python mirror."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not available")
    lines = ['#include "window_layout.h"', "#include <cstdio>", "using namespace cam::layout;", "int main() {"]
    for i, t in enumerate(LAYOUT_TOPOLOGIES):
        fields = ", ".join(str(v) for v in t.as_c_fields())
        lines.append(f"  {{ constexpr CamTopology t{{{fields}}};")
        for q in _CPP_QUANTITIES:
            lines.append(f'    std::printf("{i} {q} %lld\\n", (long long){q}(t));')
        for a, s in itertools.product(range(t.A), range(t.slots)):
            lines.append(f'    std::printf("{i} ffn_ready_signal_off/{a}/{s} %lld\\n", (long long)ffn_ready_signal_off(t, {a}, {s}));')
            lines.append(f'    std::printf("{i} ffn_region_off/{a}/{s} %lld\\n", (long long)ffn_region_off(t, {a}, {s}));')
        for s in range(t.slots):
            lines.append(f'    std::printf("{i} attn_slot_state_off/{s} %lld\\n", (long long)attn_slot_state_off(t, {s}));')
            lines.append(f'    std::printf("{i} attn_combine_row_off/{s}/3 %lld\\n", (long long)attn_combine_row_off(t, {s}, 3));')
            lines.append(f'    std::printf("{i} attn_combine_seal_off/{s}/3 %lld\\n", (long long)attn_combine_seal_off(t, {s}, 3));')
            lines.append(f'    std::printf("{i} region_token_seal_off/{s} %lld\\n", (long long)region_token_seal_off(t, {s}));')
            for f in range(t.F):
                lines.append(f'    std::printf("{i} attn_completion_signal_off/{s}/{f} %lld\\n", (long long)attn_completion_signal_off(t, {s}, {f}));')
        for j, p in itertools.product(range(t.R), range(t.P)):
            for fn in ("work_item_cell_out_off", "work_item_cell_count", "work_item_cell_src_off"):
                lines.append(f'    std::printf("{i} {fn}/{j}/{p} %lld\\n", (long long){fn}(t, {j}, {p}));')
        lines.append("  }")
    lines.append("  return 0;\n}")
    src = tmp_path / "mirror.cpp"
    src.write_text("\n".join(lines))
    exe = tmp_path / "mirror"
    subprocess.run([gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "kernels" / "common"),
                    str(src), "-o", str(exe)], check=True, timeout=120)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=30).stdout
    checked = 0
    for line in out.splitlines():
        i, key, value = line.split()
        t = LAYOUT_TOPOLOGIES[int(i)]
        name, *args = key.split("/")
        expected = getattr(t, name)(*map(int, args)) if args else _py_value(t, name)
        assert int(value) == expected, (i, key)
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("t", LAYOUT_TOPOLOGIES, ids=lambda t: f"D{t.D}P{t.P}F{t.F}E{t.E}K{t.K}q{t.quant}")
def test_topology_sizes_come_from_the_header(t):
    """cam.Topology takes its sizes from the compiled header; they equal the tests' independent mirror."""
    topology = t.topology
    for name in ("recv_rows", "worst_case_rows", "work_item_words", "attn_window_bytes", "ffn_window_bytes",
                 "window_bytes", "fingerprint"):
        assert getattr(topology, name) == getattr(t, name), name
    for rank in range(topology.world_size):
        assert topology.rank_window_bytes(rank) == t.rank_window_bytes(rank)


@pytest.mark.slow
def test_cpp_check_topology_agrees_on_rejects(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not available")
    # (fields in CamTopology order, expected field index)
    cases = [
        ((2, 2, 2, 7, 2, 64, 16, 3, 2, 2, 1, 64), 4),
        ((2, 2, 2, 8, 9, 64, 16, 3, 2, 2, 1, 64), 5),
        ((2, 2, 2, 8, 2, 64, 16, 3, 0, 2, 1, 64), 9),
        ((2, 2, 2, 8, 2, 64, 16, 3, 2, 2, 1, 0), 12),
        ((2, 2, 2, 8, 2, 64, 16, 3, 2, 2, 1, 64, -1), 13),
        ((2, 2, 2, 8, 2, 64, 16, 3, 2, 2, 1, 64, 0), 0),  # 0 is Bmax; a 12-field initialiser means the same
        ((2, 2, 2, 7, 2, 64, 16, 3, 2, 2, 1, 64, 0, 4), 0),  # E % F != 0 with slots for every expert
        ((2, 2, 2, 7, 2, 64, 16, 3, 2, 2, 1, 64, 0, 3), 14),  # 2 ranks of 3 slots cannot hold 7 experts
        ((2, 2, 2, 8, 2, 64, 16, 3, 2, 2, 1, 64, 0, -1), 14),
        ((1 << 20, 1 << 10, 2, 8, 1, 1 << 20, 1 << 20, 3, 2, 2, 1, 64), 15),
    ]
    body = "\n".join(
        f'  std::printf("%lld\\n", (long long)check_topology(CamTopology{{{", ".join(map(str, c))}}}));'
        for c, _ in cases)
    src = tmp_path / "check.cpp"
    src.write_text('#include "window_layout.h"\n#include <cstdio>\nusing namespace cam::layout;\n'
                   f"int main() {{\n{body}\n  return 0;\n}}\n")
    exe = tmp_path / "check"
    subprocess.run([gxx, "-std=c++17", "-I", str(ROOT / "kernels" / "common"), str(src), "-o", str(exe)],
                   check=True, timeout=120)
    got = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True, text=True,
                                          timeout=30).stdout.split()]
    assert got == [f for _, f in cases]


# ----------------------------------------------------------------------------- golden: dispatch


def _inputs(t: Topology, bs, seed=0, dtype=torch.bfloat16, ids=None):
    g = torch.Generator().manual_seed(seed)
    out = []
    for p, b in enumerate(bs):
        x = torch.randn((b, t.H), generator=g).to(dtype)
        if ids is not None:
            topk = torch.tensor(ids[p], dtype=torch.int32).reshape(b, t.K)
        else:
            topk = torch.randint(-1, t.E, (b, t.K), generator=g, dtype=torch.int32)
        w = torch.rand((b, t.K), generator=g, dtype=torch.float32)
        out.append((x, topk, w))
    return out


@pytest.mark.parametrize("quantized", [False, True])
def test_dispatch_rows_counts_and_order(quantized):
    t = topo(quantized=quantized)
    inp = _inputs(t, [5, 7], seed=1)
    quant = _quant()
    total = 0
    for f in range(t.F):
        rank = t.A + f
        d = dispatch(t, [(x, i) for x, i, _ in inp], rank, quant_fn=quant)
        routed = sum(int(((i >= f * t.R) & (i < (f + 1) * t.R)).sum()) for _, i, _ in inp)
        assert len(d["row_source"]) == d["rows"].shape[0] == int(d["counts"].sum()) == routed
        assert d["counts"].dtype == torch.int64 and d["counts"].shape == (t.R,)
        # order: local expert, then (participant, token, slot)
        keys = [(int(j), *src) for j, src in zip(d["local_expert"], d["row_source"])]
        assert keys == sorted(keys)
        for i, (p, tok, k) in enumerate(d["row_source"]):
            x, ids, _ = inp[p]
            assert int(ids[tok, k]) == f * t.R + int(d["local_expert"][i])
            if quantized:
                q, s = quant(x)
                assert torch.equal(d["rows"][i], q[tok]) and d["scales"][i] == s[tok]
            else:
                assert torch.equal(d["rows"][i], x[tok])
        assert d["rows"].dtype == (torch.int8 if quantized else torch.bfloat16)
        assert ("scales" in d) == quantized
        total += routed
    assert total == sum(int((i != -1).sum()) for _, i, _ in inp)


def test_dispatch_empty_slots_duplicates_and_zero_tokens():
    t = topo(P=2, K=3, E=8, F=2)
    ids = [[[-1, -1, -1], [1, 1, 6], [6, -1, 1]], []]  # participant 1 has B = 0
    inp = _inputs(t, [3, 0], ids=ids)
    d0 = dispatch(t, [(x, i) for x, i, _ in inp], t.A, quant_fn=_quant())
    assert d0["row_source"] == [(0, 1, 0), (0, 1, 1), (0, 2, 2)]  # duplicates give one row per slot
    assert d0["counts"].tolist() == [0, 3, 0, 0]
    d1 = dispatch(t, [(x, i) for x, i, _ in inp], t.A + 1, quant_fn=_quant())
    assert d1["row_source"] == [(0, 1, 2), (0, 2, 0)]
    assert d1["counts"].tolist() == [0, 0, 2, 0]
    all_minus = _inputs(t, [2, 1], ids=[[[-1] * 3] * 2, [[-1] * 3]])
    d = dispatch(t, [(x, i) for x, i, _ in all_minus], t.A, quant_fn=_quant())
    assert d["rows"].shape == (0, t.H) and d["counts"].sum() == 0


def test_dispatch_all_tokens_one_expert_and_window_bound():
    ids = [[[3, 3]] * 5, [[3, -1]] * 4]
    narrow = topo(window_tokens=4)
    inp = _inputs(narrow, [5, 4], ids=ids)
    with pytest.raises(ValueError, match="window_tokens"):
        dispatch(narrow, [(x, i) for x, i, _ in inp], narrow.A, quant_fn=_quant())  # participant 0: 5 tokens > 4
    d = dispatch(narrow, [(x, i) for x, i, _ in inp], narrow.A + 1, quant_fn=_quant())  # nothing for rank A+1
    assert d["rows"].shape[0] == 0
    t = topo(capacity=10)  # more rows than capacity is not an error: the ops deliver them in chunks
    d = dispatch(t, [(x, i) for x, i, _ in inp], t.A, quant_fn=_quant())
    assert d["counts"].tolist() == [0, 0, 0, 14]
    assert [src[0] for src in d["row_source"]] == [0] * 10 + [1] * 4


def test_dispatch_rejects_bad_inputs():
    t = topo()
    x = torch.zeros((2, t.H), dtype=torch.bfloat16)
    for bad in ([[0, 8], [0, 0]], [[0, -2], [0, 0]]):
        with pytest.raises(ValueError, match="topk_ids"):
            dispatch(t, [(x, torch.tensor(bad, dtype=torch.int32))] * 2, t.A, quant_fn=_quant())
    big = torch.zeros((t.Bmax + 1, t.H), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="Bmax"):
        dispatch(t, [(big, torch.zeros((t.Bmax + 1, t.K), dtype=torch.int32))] * 2, t.A, quant_fn=_quant())
    with pytest.raises(ValueError, match="FFN rank"):
        dispatch(t, [(x, torch.zeros((2, t.K), dtype=torch.int32))] * 2, 0, quant_fn=_quant())
    with pytest.raises(ValueError, match="participants"):
        dispatch(t, [(x, torch.zeros((2, t.K), dtype=torch.int32))], t.A, quant_fn=_quant())


# ----------------------------------------------------------------------------- golden: combine / round trip


def _expected_weighted_sum(x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # Independent restatement in numpy float32 (no FMA): acc = acc + w*x over non-empty slots in k order.
    xs = x.to(torch.float32).numpy()
    ws = w.numpy()
    acc = np.zeros(xs.shape, dtype=np.float32)
    for tok in range(xs.shape[0]):
        for k in range(ids.shape[1]):
            if int(ids[tok, k]) != -1:
                prod = np.multiply(ws[tok, k], xs[tok], dtype=np.float32)
                acc[tok] = np.add(acc[tok], prod, dtype=np.float32)
    return torch.from_numpy(acc).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_round_trip_identity_is_weighted_sum_rounded_once(dtype):
    t = topo(D=1, P=2, F=2, E=8, K=4, H=32, Bmax=9, quantized=False)
    ids = [
        [[0, 5, -1, 5], [7, 7, 7, 7], [-1, -1, -1, -1], [1, 2, 3, 4], [6, 0, 6, 0]],
        [[2, -1, 2, -1], [4, 3, 2, 1], [0, 1, 2, 3], [5, 6, 7, 0], [3, 3, 3, -1], [1, -1, -1, -1], [7, 6, 5, 4],
         [0, 0, 0, 0], [4, 5, 6, 7]],
    ]
    inp = _inputs(t, [5, 9], seed=3, dtype=dtype, ids=ids)
    outs = round_trip(t, inp, lambda e, rows, scales: rows.clone())
    for (x, i, w), out in zip(inp, outs):
        assert out.dtype == dtype and out.shape == x.shape
        expected = _expected_weighted_sum(x, i, w)
        assert torch.equal(out, expected)
        # all-empty token gives exact zeros
        empty = (i == -1).all(dim=1)
        assert torch.equal(out[empty], torch.zeros_like(out[empty]))
    # and the one-rounding result is within half an ulp-ish of the float64 sum (sanity, not the contract)
    x, i, w = inp[1]
    ref64 = sum(torch.where((i[:, k] != -1)[:, None], w[:, k:k + 1].double() * x.double(), torch.zeros(1,
                dtype=torch.float64)) for k in range(t.K))
    torch.testing.assert_close(outs[1].double(), ref64, atol=1e-2, rtol=1e-2)


def test_round_trip_quantized_with_per_expert_function():
    t = topo(D=1, P=2, F=2, E=4, K=2, H=16, Bmax=6, quantized=True)
    inp = _inputs(t, [6, 3], seed=5)
    quant = _quant()

    def expert_fn(e, rows, scales):
        # dequantize then scale by (global expert + 1): routing mistakes change the result
        deq = rows.to(torch.float32) * scales[:, None]
        return (deq * (e.to(torch.float32) + 1)[:, None]).to(torch.bfloat16)

    outs = round_trip(t, inp, expert_fn, quant_fn=quant, global_ids=True)
    for (x, ids, w), out in zip(inp, outs):
        q, s = quant(x)
        deq = q.to(torch.float32) * s[:, None]
        expected = torch.zeros((x.shape[0], t.H), dtype=torch.float32)
        for k in range(t.K):
            for tok in range(x.shape[0]):
                e = int(ids[tok, k])
                if e == -1:
                    continue
                row = (deq[tok] * (e + 1)).to(torch.bfloat16).to(torch.float32)
                expected[tok] = expected[tok] + w[tok, k] * row
        assert torch.equal(out, expected.to(torch.bfloat16))


def test_combine_skips_empty_slots_and_checks_sources():
    t = topo(K=3, H=4)
    ids = torch.tensor([[2, -1, 2], [-1, -1, -1]], dtype=torch.int32)
    w = torch.tensor([[0.5, 100.0, 0.25], [1.0, 1.0, 1.0]], dtype=torch.float32)
    row = torch.tensor([1.0, -2.0, 4.0, 8.0], dtype=torch.bfloat16)
    out = combine(t, ids, w, {(0, 0): row, (0, 2): row})
    assert out.tolist() == [[0.75, -1.5, 3.0, 6.0], [0.0, 0.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="missing"):
        combine(t, ids, w, {(0, 0): row})
    with pytest.raises(ValueError, match="extra"):
        combine(t, ids, w, {(0, 0): row, (0, 2): row, (0, 1): row})
    with pytest.raises(ValueError, match="fp32"):
        combine(t, ids, w.double(), {(0, 0): row, (0, 2): row})
    # B = 0
    assert combine(t, torch.zeros((0, 3), dtype=torch.int32), torch.zeros((0, 3)), {}).shape == (0, 4)

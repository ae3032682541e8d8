"""Plots of cam-sim results (matplotlib, from the ``viz`` extra, imported only here and only when asked)."""

from __future__ import annotations

import os
from typing import Dict, List


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit(f"cam-sim: plots need matplotlib (pip install matplotlib, or '.[viz]' from the checkout): {e}")
    return plt


def _finish(plt, fig, ax, title: str, path: str) -> None:
    """The look every study plot shares: title, small legend, light grid, written at 100 dpi and closed."""
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _style(label: str) -> str:
    """One line style per mode, so every plot tells async, sync and colocated apart the same way."""
    return "-" if label.startswith("async") else "-." if label.startswith("colocated") else "--"


def ttft_cdf(curves: Dict[str, List[float]], path: str, title: str, slo_s=None) -> None:
    """One CDF per label (e.g. async / sync) of per-request TTFT."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, values in curves.items():
        v = sorted(values)
        ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=label, linestyle=_style(label))
    if slo_s is not None:
        ax.axvline(slo_s, color="grey", linestyle=":", label=f"SLO {slo_s:g} s")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    _finish(plt, fig, ax, title, path)


def _label(r: dict) -> str:
    t = r["topology"]
    return f"colocated N={t['D']}" if r["mode"] == "colocated" else f"{r['mode']} D={t['D']} F={t['F']}"


def throughput_vs_rate(runs: List[dict], path: str, title: str) -> None:
    """SLO-compliant throughput (and offered load) against arrival rate, one line per (mode, D:F)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    lines: Dict[str, list] = {}
    for r in runs:
        key = _label(r)
        lines.setdefault(key, []).append((r["rate"], r["slo"]["goodput_tok_s"]))
    for key, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] / 1e3 for p in pts], marker="o", label=key, linestyle=_style(key))
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("SLO-compliant throughput (k tokens/s)")
    _finish(plt, fig, ax, title, path)


def slo_vs_load(runs: List[dict], path: str, title: str, sustain=None) -> None:
    """SLO attainment against offered load (multiples of the colocated baseline's sustained rate), per deployment."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    lines: Dict[str, list] = {}
    for r in runs:
        lines.setdefault(_label(r), []).append((r["load"], r["slo"]["compliant_fraction"]))
    for key, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key, linestyle=_style(key))
    if sustain is not None:
        ax.axhline(sustain, color="grey", linestyle=":", label=f"sustained: {sustain:.0%} within SLO")
    ax.set_xlabel("offered load (x the rate colocated sustains)")
    ax.set_ylabel("SLO attainment (fraction of requests)")
    ax.set_ylim(0, 1.05)
    _finish(plt, fig, ax, title, path)


def utilisation_vs_af(runs: List[dict], path: str, title: str) -> None:
    """FFN and Attention utilisation against the A:F ratio, per mode."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    by_mode: Dict[str, list] = {}
    for r in runs:
        t = r["topology"]
        if r["mode"] == "colocated":  # no A:F ratio: every device is both
            continue
        by_mode.setdefault(r["mode"], []).append((t["D"] * t["P"] / t["F"], r["ffn_utilisation"],
                                                  r["attention_utilisation"]))
    for mode, pts in sorted(by_mode.items()):
        pts.sort()
        style = "-" if mode == "async" else "--"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=f"FFN ({mode})")
        ax.plot([p[0] for p in pts], [p[2] for p in pts], style, marker="s", label=f"Attention ({mode})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("A:F (Attention ranks per FFN rank)")
    ax.set_ylabel("utilisation")
    ax.set_ylim(0, 1.05)
    _finish(plt, fig, ax, title, path)


def all_plots(result: dict, curves: Dict[str, List[float]], out_dir: str, slo_s=None) -> List[str]:
    os.makedirs(out_dir, exist_ok=True)
    runs = result["runs"]
    written = []
    if curves:
        p = os.path.join(out_dir, "ttft_cdf.png")
        ttft_cdf(curves, p, "TTFT CDF", slo_s)
        written.append(p)
    if "load_axis" in result:
        la = result["load_axis"]
        p = os.path.join(out_dir, "slo_vs_load.png")
        slo_vs_load(runs, p, f"SLO attainment vs load (1 = {la['rate_req_s']:.3g} req/s, TTFT SLO {la['slo_s']:g} s)",
                    la["sustain"])
        written.append(p)
    if len({r.get("rate") for r in runs}) > 1 and all("slo" in r for r in runs):
        p = os.path.join(out_dir, "throughput_vs_rate.png")
        throughput_vs_rate(runs, p, "SLO-compliant throughput vs arrival rate")
        written.append(p)
    if len({(r["topology"]["D"], r["topology"]["F"]) for r in runs if r["mode"] != "colocated"}) > 1:
        p = os.path.join(out_dir, "utilisation_vs_af.png")
        top = max(r.get("rate", 0.0) for r in runs)
        utilisation_vs_af([r for r in runs if r.get("rate", 0.0) == top], p,
                          f"Utilisation vs A:F (rate {top:g} req/s)" if top else "Utilisation vs A:F")
        written.append(p)
    return written

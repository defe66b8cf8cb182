"""The OmniMoE microbenchmark's summaries (``benchmarks/omnimoe.py``): the router speedup at the target point, the
GPU targets' lines and ``results.html``."""

from __future__ import annotations

from typing import Any

from npukit.benchmarks._timing import Spread, ratio_interval

PLOT_NAME = "omnimoe_ms"  # perf_report's CSV and plot: PLOT_NAME.csv, PLOT_NAME.png


def router_speedup(rows: list[dict[str, Any]]) -> tuple[tuple[float, float, float], str, bool] | None:
    """(median ratio, low, high), where, whether the range is too wide: dense over Cartesian router at the target
    point (the largest measured router point when the target was skipped)."""
    by: dict[tuple[int, int, int, int], dict[str, Spread]] = {}
    for r in rows:
        if r["path"].startswith("router (") and r["n"]:
            kind = "dense" if "dense" in r["path"] else "cart"
            by.setdefault((r["tokens"], r["experts"], r["hidden"], r["topk"]), {})[kind] = Spread(
                n=r["n"], min=r["low_ms"], median=r["median_ms"], max=r["high_ms"])
    pts = [(key, v) for key, v in by.items() if "dense" in v and "cart" in v]
    if not pts:
        return None
    key, v = max(pts, key=lambda p: (p[0][1], p[0][0]))
    ratio = ratio_interval(v["dense"], v["cart"])
    wide = v["dense"].wide or v["cart"].wide or ratio[2] > 2 * ratio[1]
    return ratio, f"N={key[1]:,}, tokens={key[0]:,}, hidden={key[2]:,}, k={key[3]}", wide


def results_html(device: str, lines: list[str], headers: list[str], rows: list[dict[str, Any]]) -> str:
    """``results.html``: the plot, the summary lines (warnings included) and the whole table."""
    from html import escape

    keys = ["path", "tokens", "experts", "topk", "reuse", "median_ms", "low_ms", "high_ms", "n", "spread",
            "spread_flag", "gflop", "hbm_mb", "gflops_per_s", "gb_per_s", "pct_bw_ceiling", "note"]

    def cell(v: Any) -> str:
        return escape(f"{v:.4g}" if isinstance(v, float) else str(v))

    body = "".join("<tr" + (' class="wide"' if r.get("spread_flag") else "") + ">"
                   + "".join(f"<td>{cell(r.get(k, ''))}</td>" for k in keys) + "</tr>\n" for r in rows)
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    summary = "".join(f"<li>{escape(ln)}</li>" for ln in lines)
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>npukit bench omnimoe</title><style>"
            "body{font-family:sans-serif} table{border-collapse:collapse;font-size:13px} "
            "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right} td:first-child,td:last-child{text-align:left}"
            " tr.wide{background:#fde2e2}</style></head><body>"
            f"<h1>npukit bench omnimoe</h1><p>{escape(device)}</p><ul>{summary}</ul>"
            f"<img src='{PLOT_NAME}.png' alt='median ms per path and point' style='max-width:100%'>"
            "<p>ms: min / median / max over n samples; max/min above 2 is flagged WIDE (red rows): too noisy to read."
            f"</p><table><tr>{head}</tr>\n{body}</table></body></html>\n")


def gpu_targets(rows: list[dict[str, Any]], cuda: bool) -> list[str]:
    if not cuda:
        return ["GPU targets (layer >= 10x PEER at 4,096 tokens; expert kernel >= 50% of the bandwidth ceiling): "
                "not measured, no CUDA device in this run"]
    out = []
    lay = {(r["tokens"], r["experts"], r["topk"]): r["median_ms"] for r in rows if r["path"] == "layer fwd"}
    peer = {(r["tokens"], r["experts"], r["topk"]): r["median_ms"] for r in rows if r["path"] == "PEER fwd (npukit)"}
    for key in sorted(set(lay) & set(peer)):
        if key[0] == 4096:
            out.append(f"layer vs PEER kernel at T={key[0]} N={key[1]} k={key[2]}: {peer[key] / lay[key]:.1f}x (target >= 10x)")
    for r in rows:
        if r["path"] == "expert fwd" and r["tokens"] == 1024 and r["topk"] == 32:
            out.append(f"expert fwd T=1024 N={r['experts']} k=32: {r['pct_bw_ceiling']:.0f}% of the bandwidth ceiling "
                       "(target >= 50%)")
    return out

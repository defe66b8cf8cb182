"""``npukit experiment omnimoe [--quick] [--out DIR]``: the OmniMoE experiment, CSV and plots.

1. Router cost against N: Cartesian vs dense N-way router, measured on this machine's CPU and
   counted in FLOPs; the fitted log-log slopes show the sqrt N (0.5) vs N (1) growth.
2. Expert-centric vs token-centric against N and tokens: measured CPU forward time (torch paths,
   scheduler included), modelled GPU DRAM bytes and the 128x128 NPU model's cycles and energy; the
   crossover in expert reuse (tokens * k / N) where token/expert crosses 1, per token count.
3. A byte-level Llama (transformers ``LlamaForCausalLM``) on the python3-doc corpus with its dense
   SwiGLU MLPs, OmniMoE and PEER MLPs (``replace_mlp``) at matched active parameters per token:
   loss curves.

``--quick`` (the test's mode) shrinks every sweep and the training to well under 3 minutes on two
cores. GPU figures are not produced here: on a machine without CUDA the summary says so.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from ._config import Config

QUICK = dict(router=dict(experts=[1024, 4096, 16384, 65536], tokens=256, hidden=256, k=16),
             time=dict(experts=[256, 1024, 4096, 16384, 65536], tokens=[256, 1024], hidden=128, k=16),
             model=dict(experts=[1024, 4096, 16384, 65536, 262144, 1048576], tokens=[1024, 4096], hidden=1024, k=32,
                        npu_max_pairs=1 << 15),
             lm=dict(steps=24, corpus_bytes=1_000_000, batch=16, eval_seqs=64))
FULL = dict(router=dict(experts=[1024, 4096, 16384, 65536, 262144, 1048576], tokens=1024, hidden=1024, k=32),
            time=dict(experts=[1024, 4096, 16384, 65536, 262144], tokens=[1024, 4096], hidden=256, k=32),
            model=dict(experts=[1024, 4096, 16384, 65536, 262144, 1048576], tokens=[1024, 4096], hidden=1024, k=32,
                       npu_max_pairs=1 << 18),
            lm=dict(steps=600, corpus_bytes=2_000_000, batch=16, eval_seqs=256))


def run_experiment(out_dir: str | Path, config: Config, *, executor: Any = None, progress: bool = True) -> list[Path]:
    """Run the experiment (``config`` already validated by ``config_from_args``); writes CSVs, PNG plots
    and summary.md into ``out_dir`` and returns their paths. ``executor``: the modelled expert- vs
    token-centric grid runs on it (None: in this process)."""
    import torch

    cfg = QUICK if config.quick else FULL
    steps = config.steps if config.steps is not None else cfg["lm"]["steps"]
    threads = config.threads if config.threads is not None else (1 if config.quick else None)
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run(Path(out_dir), config, cfg, steps, executor, progress)
    finally:
        torch.set_num_threads(old_threads)


def _run(out_dir: Path, config: Config, cfg: dict[str, Any], steps: int, executor: Any, progress: bool) -> list[Path]:
    import torch

    from npukit.models.byte_llama import load_corpus
    from npukit.sim import prepare_out_dir, write_csv, write_text

    from . import _quality as q
    from . import _sweeps as sw

    quick = config.quick
    seeds = range(config.seeds or (1 if quick else 3))
    corpus = load_corpus(cfg["lm"]["corpus_bytes"])  # fail early, before any sweep, when it is missing
    out = prepare_out_dir(out_dir)
    t_start = time.perf_counter()
    mode = "smoke run (--quick): no verdicts" if quick else "full"
    print(f"npukit experiment omnimoe ({mode}) -> {out}")

    rc = cfg["router"]
    print(f"[1/3] router cost vs N (T={rc['tokens']}, H={rc['hidden']}, k={rc['k']}) ...", flush=True)
    router_rows = sw.router_sweep(rc["experts"], rc["tokens"], rc["hidden"], rc["k"])
    slopes = {}
    for name in ("cartesian", "dense"):
        pts = [r for r in router_rows if r["router"] == name]
        slopes[name] = (sw.loglog_slope([r["experts"] for r in pts], [r["ms"] for r in pts]),
                        sw.loglog_slope([r["experts"] for r in pts], [r["gflop"] for r in pts]))
    write_csv(Path(out) / "router_cost.csv", router_rows)

    tc = cfg["time"]
    print(f"[2/3] expert- vs token-centric (CPU time at H={tc['hidden']}, k={tc['k']}; model at paper sizes) ...",
          flush=True)
    time_rows = sw.centric_time_sweep(tc["experts"], tc["tokens"], tc["hidden"], tc["k"])
    mc = cfg["model"]
    model_rows = sw.centric_model_sweep(mc["experts"], mc["tokens"], mc["hidden"], mc["k"],
                                        npu_max_pairs=mc["npu_max_pairs"], executor=executor, arch=config.arch)
    write_csv(Path(out) / "centric_time.csv", time_rows)
    write_csv(Path(out) / "centric_model.csv", model_rows)
    x_time = sw.crossover(time_rows, "token_over_expert")
    x_bytes = sw.crossover(model_rows, "token_over_expert_bytes")
    x_npu = sw.crossover(model_rows, "npu_token_over_expert_cycles")

    spec = q.SPEC
    recipe = f"recipe {config.recipe}" + (f", expert tables at {config.expert_lr:g}x the rate" if config.recipe == "sparse"
                                          else "")
    print(f"[3/3] byte-level Llama ({spec.tag()}) on python3-doc, dense / OmniMoE / PEER MLPs, {steps} steps each, "
          f"seeds {', '.join(map(str, seeds))}, {recipe} ...", flush=True)
    lm_rows: list[dict[str, Any]] = []
    results: dict[str, list[dict[str, Any]]] = {}
    for kind in q.KINDS:
        for seed in seeds:
            res = q.train_kind(kind, corpus, steps, spec, batch=cfg["lm"]["batch"], progress=progress, seed=seed,
                               eval_seqs=cfg["lm"]["eval_seqs"], recipe=config.recipe, expert_lr=config.expert_lr)
            results.setdefault(kind, []).append(res)
            for step, tr, va, sec in res["curve"]:
                lm_rows.append(dict(model=kind, seed=seed, step=step, train_loss=tr, val_loss=va, seconds=sec,
                                    active_ffn_params=res["active_ffn_params"], total_ffn_params=res["total_ffn_params"]))
            print(f"  {kind:8s} seed {seed} active FFN params {res['active_ffn_params']:,} (total "
                  f"{res['total_ffn_params']:,}): val loss {res['final_val']:.3f} nats/byte, {res['seconds']:.1f} s",
                  flush=True)
    paths = [Path(out) / n for n in ("router_cost.csv", "centric_time.csv", "centric_model.csv")]
    paths.append(write_csv(Path(out) / "lm_loss.csv", lm_rows))

    plots = _plots(out, router_rows, time_rows, model_rows, lm_rows)
    cuda = torch.cuda.is_available()
    lines = [
        f"# OmniMoE experiment ({mode})", "",
        f"Date {time.strftime('%Y-%m-%d %H:%M %Z')}; device: "
        f"{torch.cuda.get_device_name() if cuda else 'CPU only'} ({torch.get_num_threads()} torch threads).",
        "GPU figures: not measured in this run" + (" (the benchmark `npukit bench omnimoe` measures them on CUDA)."
                                                   if cuda else " (no CUDA device)."), "",
        "## Router cost vs N", "",
        f"T={rc['tokens']}, hidden {rc['hidden']}, k={rc['k']}, CPU torch. Fitted log-log slope of time (FLOPs) vs N: "
        f"Cartesian {slopes['cartesian'][0]:.2f} ({slopes['cartesian'][1]:.2f}), "
        f"dense {slopes['dense'][0]:.2f} ({slopes['dense'][1]:.2f}); sqrt N growth is 0.5, linear 1.0.", "",
        "| N | Cartesian ms | dense ms | dense / Cartesian |", "|---|---|---|---|",
    ]
    by_n: dict[int, dict[str, float]] = {}
    for r in router_rows:
        by_n.setdefault(r["experts"], {})[r["router"]] = r["ms"]
    for N, d in by_n.items():
        lines.append(f"| {N:,} | {d['cartesian']:.2f} | {d['dense']:.2f} | {d['dense'] / d['cartesian']:.1f}x |")
    lines += ["", "## Expert-centric vs token-centric", "",
              "Crossover = the expert reuse (tokens*k/N) where token-centric / expert-centric cost crosses 1 "
              "(a ratio above 1 means expert-centric wins); '-' = no crossing inside the sweep.", "",
              "| tokens | CPU time (measured) | GPU DRAM bytes (model) | NPU cycles (model) |", "|---|---|---|---|"]
    for T in sorted(set(x_time) | set(x_bytes)):
        lines.append(f"| {T:,} | {x_time.get(T) or '-'} | {x_bytes.get(T) or '-'} | {x_npu.get(T) or '-'} |")
    lines += ["", f"CPU time (measured, hidden {tc['hidden']}, k={tc['k']}, uniform routing):", "",
              "| tokens | N | reuse | active | expert-centric ms | token-centric ms | token / expert |",
              "|---|---|---|---|---|---|---|"]
    for r in time_rows:
        lines.append(f"| {r['tokens']:,} | {r['experts']:,} | {r['reuse']:.3g} | {r['active']:,} | {r['expert_ms']:.2f} | "
                     f"{r['token_ms']:.2f} | {r['token_over_expert']:.2f} |")
    lines += ["", f"Models (hidden {mc['hidden']}, k={mc['k']}, bf16 on a GPU with a 50 MiB L2; NPU: {config.arch}, 8-bit; "
              "uniform routing):", "",
              "| tokens | N | reuse | active | expert DRAM MB | token DRAM MB | token / expert bytes "
              "| NPU token / expert cycles |",
              "|---|---|---|---|---|---|---|---|"]
    for r in model_rows:
        lines.append(f"| {r['tokens']:,} | {r['experts']:,} | {r['reuse']:.3g} | {r['active']:,} | {r['expert_hbm_mb']:.1f} | "
                     f"{r['token_hbm_mb']:.1f} | {r['token_over_expert_bytes']:.2f} | "
                     f"{_fmt_x(r.get('npu_token_over_expert_cycles'))} |")
    def mean_val(kind: str) -> float:
        return sum(r["final_val"] for r in results[kind]) / len(results[kind])

    dense_val = mean_val("dense")
    lines += ["", "## LM quality (matched active MLP parameters per token)", "",
              f"A byte-level `LlamaForCausalLM` (transformers; RMSNorm, RoPE, GQA {spec.heads}/{spec.kv_heads} heads, "
              f"SwiGLU): hidden {spec.hidden}, {spec.layers} layers, context {spec.ctx}, batch {cfg['lm']['batch']}, "
              f"{steps} steps, {len(corpus.train):,} training bytes, {recipe}; validation loss on "
              f"{cfg['lm']['eval_seqs']} held-out windows; every decoder layer's MLP swapped by "
              f"`replace_mlp` ({q.EXPERTS} experts): {', '.join(f'{k}: {v}' for k, v in q.mlp_configs(spec).items())}.",
              "Target: at matched active parameters, validation loss no worse than dense. The paper (docs/references.md) "
              "reports quality at scale (1.7B active parameters, 50.9% zero-shot average), not this toy comparison.", "",
              "| model | active MLP params | total MLP params | final val loss per seed (nats/byte) | mean | "
              "vs dense (mean, across-seed 95% interval) | verdict | seconds |", "|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for kind, runs in results.items():
        r0 = runs[0]
        vals = " / ".join(f"{r['final_val']:.3f}" for r in runs)
        secs = " / ".join(f"{r['seconds']:.0f}" for r in runs)
        diffs = [r["final_val"] - d["final_val"] for r, d in zip(runs, results["dense"], strict=True)]
        lo, hi = seed_interval(diffs)
        ci = f" [{lo:+.3f}, {hi:+.3f}]" if math.isfinite(lo) else " (one seed: no interval)"
        v = ("smoke run: no verdict" if quick else "-" if kind == "dense" else loss_verdict(lo, hi))
        verdicts.append(f"{kind}: {v}")
        lines.append(f"| {kind} | {r0['active_ffn_params']:,} | {r0['total_ffn_params']:,} | {vals} | "
                     f"{mean_val(kind):.3f} | {mean_val(kind) - dense_val:+.3f}{ci if kind != 'dense' else ''} | {v} "
                     f"| {secs} |")
    lines += ["", ("Smoke run (--quick): a few steps and one seed; the losses only show that every model trains, "
                   "no comparison is drawn. Run without --quick (3 seeds by default) for the verdict."
                   if quick else
                   f"Verdict per kind against the target (validation loss no worse than dense): PASS where the whole "
                   f"across-seed interval ({len(seeds)} seeds, paired by seed, Student t 95%) is at or below 0, FAIL "
                   "where it is above 0, WITHIN NOISE where it straddles 0; NO INTERVAL with one seed.")]
    lines += ["", "Files: router_cost.csv, centric_time.csv, centric_model.csv, lm_loss.csv, " + ", ".join(plots), ""]
    paths += [Path(out) / p for p in plots]
    paths.append(write_text(Path(out) / "summary.md", "\n".join(lines)))
    print("\n".join(lines[6:12]))
    print(f"crossover reuse (time/bytes/NPU) per tokens: {x_time} / {x_bytes} / {x_npu}")
    print("LM quality vs dense (validation loss, matched active parameters): " + "; ".join(verdicts))
    print(f"done in {time.perf_counter() - t_start:.0f} s")
    return paths


def seed_interval(diffs: list[float], level: float = 0.95) -> tuple[float, float]:
    """The Student-t ``level`` interval of the mean of per-seed differences (nats/byte); (nan, nan)
    with fewer than two seeds."""
    if len(diffs) < 2:
        return math.nan, math.nan
    from scipy.stats import t

    n = len(diffs)
    m = sum(diffs) / n
    sd = math.sqrt(sum((d - m) ** 2 for d in diffs) / (n - 1))
    h = float(t.ppf((1 + level) / 2, n - 1)) * sd / math.sqrt(n)
    return m - h, m + h


def loss_verdict(lo: float, hi: float) -> str:
    """PASS (no worse than dense across the interval), FAIL (worse across it), WITHIN NOISE or NO INTERVAL."""
    if not math.isfinite(lo):
        return "NO INTERVAL (one seed)"
    return "PASS" if hi <= 0 else "FAIL" if lo > 0 else "WITHIN NOISE"


def _fmt_x(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.2f}"


def _plots(out: Path, router_rows: list[dict[str, Any]], time_rows: list[dict[str, Any]],
           model_rows: list[dict[str, Any]], lm_rows: list[dict[str, Any]]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []

    from npukit.sim import write_figure

    def save(fig: Any, name: str) -> None:
        write_figure(Path(out) / name, fig, dpi=110, bbox_inches="tight")
        plt.close(fig)
        names.append(name)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, style in (("cartesian", "o-"), ("dense", "s-")):
        pts = [r for r in router_rows if r["router"] == name]
        ax.loglog([r["experts"] for r in pts], [r["ms"] for r in pts], style, label=f"{name} router (measured)")
    ns = sorted({r["experts"] for r in router_rows})
    c0 = next(r["ms"] for r in router_rows if r["router"] == "cartesian" and r["experts"] == ns[0])
    d0 = next(r["ms"] for r in router_rows if r["router"] == "dense" and r["experts"] == ns[0])
    ax.loglog(ns, [c0 * math.sqrt(n / ns[0]) for n in ns], ":", color="grey", label="sqrt N reference")
    ax.loglog(ns, [d0 * n / ns[0] for n in ns], "--", color="grey", label="N reference")
    ax.set_xlabel("experts N")
    ax.set_ylabel("router time per call (ms, CPU)")
    ax.legend(fontsize=8)
    ax.set_title("Router cost vs N")
    save(fig, "router_cost.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for T in sorted({r["tokens"] for r in time_rows}):
        pts = sorted((r["reuse"], r["token_over_expert"]) for r in time_rows if r["tokens"] == T)
        ax.semilogx(*zip(*pts, strict=True), "o-", label=f"CPU time, T={T}")
    for T in sorted({r["tokens"] for r in model_rows}):
        pts = sorted((r["reuse"], r["token_over_expert_bytes"]) for r in model_rows if r["tokens"] == T)
        ax.semilogx(*zip(*pts, strict=True), "s--", label=f"GPU DRAM bytes (model), T={T}")
        pts = sorted((r["reuse"], r["npu_token_over_expert_cycles"]) for r in model_rows
                     if r["tokens"] == T and "npu_token_over_expert_cycles" in r)
        if pts:
            ax.semilogx(*zip(*pts, strict=True), "^:", label=f"NPU cycles (model), T={T}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("expert reuse = tokens * k / N")
    ax.set_ylabel("token-centric / expert-centric cost")
    ax.legend(fontsize=7)
    ax.set_title("Expert-centric wins above 1")
    save(fig, "centric.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for kind in sorted({r["model"] for r in lm_rows}):
        pts = [r for r in lm_rows if r["model"] == kind and r["seed"] == 0]
        ax.plot([r["step"] for r in pts], [r["train_loss"] for r in pts], label=f"{kind} train")
        vp = [r for r in pts if r["val_loss"] == r["val_loss"]]
        ax.plot([r["step"] for r in vp], [r["val_loss"] for r in vp], "o--", label=f"{kind} val")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/byte)")
    ax.legend(fontsize=8)
    ax.set_title("Byte-level Llama on python3-doc")
    save(fig, "lm_loss.png")
    return names

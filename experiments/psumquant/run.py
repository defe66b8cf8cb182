"""``npukit experiment psumquant``: every number of the PsumQuant evaluation, offline, in one call.

Families (each row of every CSV has ``model``, ``policy``, ``bits``, ``array`` so runs can be joined):

* ``digits.csv``: the digits CNN (``_digits.py``), ``top1`` per policy, psum bits and array.
* ``resnet18.csv``: the full-width ResNet-18 (``_resnet.py``) on the digits at 32x32, ``top1`` per
  policy, psum bits and array on a fixed held-out subset (``n_test`` images).
* ``minilm.csv``: all-MiniLM-L6-v2 (:mod:`npukit.models.minilm`: a transformers ``BertModel``), ``cosine``
  to the fp32 embeddings and ``spearman`` of the pairwise similarities over sentences of the python3-doc corpus; column ``wa``:
  ``int8`` (int8 per-channel weights, int8 per-tensor activations, as every other family),
  ``int8-token`` (int8 per-channel weights, int8 per-token activations, as LLM int8 deployments) or
  ``fp32`` (only psums quantized); column ``attention``: ``fp32`` (QK^T and PV off the array) or
  ``psum`` (QK^T and PV on the array too: int8 operands, same policy and psum bits).
* ``lm.csv``: a byte-level ``LlamaForCausalLM`` trained here (:mod:`npukit.models.byte_llama`: RMSNorm,
  RoPE, grouped-query attention, SwiGLU), ``ppl`` and ``delta_ppl``; it stands in for the paper's
  Llama-3.1 perplexity result.
* ``energy.csv``: ResNet-18 and a Llama-3.1-8B decoder layer on the 128x128 NPU per psum buffer
  width (``_energy.py``).

Plus ``accuracy_vs_bits.png``, ``energy_breakdown.png`` and ``summary.md`` (``_report.py``).
Deltas are taken against policy ``none`` on the same array: int8 weights/activations with
unquantized (32-bit) psums, the paper's fp32-psum baseline; ``float_*`` columns give the
all-float32 model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from npukit.sim.errors import ConfigError

ALL_BITS = (16, 12, 10, 8, 6, 5, 4)  # what --psum-buffer-bits accepts
PLAN_BITS = (16, 12, 10, 8, 6, 4)  # the full plan's
RESNET_TEST_IMAGES = 719  # the digits' 40% held-out split
FAMILIES = ("digits", "resnet18", "minilm", "lm")  # the model families, in run order


@dataclass(frozen=True)
class Plan:
    """What one run evaluates (bits in bits, arrays as R for an R x R array)."""

    quick: bool = False
    families: tuple[str, ...] = FAMILIES  # which model families run (the energy table always does)
    policies: tuple[str, ...] = ("none", "static", "tile-max", "a2q", "sigma", "psumquant")
    bits: tuple[int, ...] = PLAN_BITS
    digits_arrays: tuple[int, ...] = (128, 32)
    digits_epochs: int = 15
    digits_calib: int = 256  # calibration images (training split)
    digits_eval: int | None = None  # held-out images of the psum evaluation (the first n; None: all 719)
    calib_rows: int = 1024  # rows per layer kept for the psumquant predictor fit
    minilm_calib: int = 32  # calibration sentences
    minilm_sentences: int = 256
    minilm_max_words: int = 28
    minilm_arrays: tuple[int, ...] = (128, 32)
    minilm_policies: tuple[str, ...] | None = None  # None: same as policies
    minilm_bits: tuple[int, ...] | None = None
    # MiniLM also with float32 weights/activations (only psums quantized): these policies; None: all; (): skip
    minilm_float_policies: tuple[str, ...] | None = None
    # MiniLM with int8 per-token activations: these policies; None: all; (): skip
    minilm_token_policies: tuple[str, ...] | None = None
    # MiniLM with int8 per-token activations and the attention matmuls on the array: these policies; (): skip
    minilm_attn_policies: tuple[str, ...] | None = ("none", "static", "tile-max", "sigma", "psumquant")
    resnet_epochs: int = 12
    resnet_train: int | None = None  # training images (the first n of the training split; None: all 1,078)
    resnet_arrays: tuple[int, ...] = (128, 32)
    resnet_eval: int = RESNET_TEST_IMAGES  # held-out images (the first n of the test split) for the psum evaluation
    resnet_probe: int = 64  # of those, the first n for the per-layer psum SQNR
    lm_arrays: tuple[int, ...] = (128, 32)
    lm_steps: int = 600
    lm_eval_seqs: int = 256
    lm_model: dict[str, int] = field(default_factory=lambda: {"hidden": 192, "layers": 3, "heads": 6, "kv_heads": 2,
                                                                "intermediate": 512, "ctx": 64})
    lm_corpus_bytes: int = 2_000_000


FULL = Plan()
# --quick is a smoke run: the smallest setting that still runs every code path (both array sizes, every
# MiniLM setting, training, caching, calibration, the SQNR probe, energy, plots); its numbers carry no verdict
QUICK = Plan(
    quick=True, policies=("none", "static", "psumquant"), bits=(8, 4), digits_arrays=(128, 32), digits_epochs=5,
    digits_calib=64, digits_eval=160, calib_rows=256, minilm_calib=8, minilm_sentences=32, minilm_max_words=10,
    minilm_arrays=(128,),
    minilm_policies=("none", "psumquant"),
    minilm_bits=(8,), minilm_float_policies=("none", "psumquant"), minilm_token_policies=("none", "psumquant"),
    minilm_attn_policies=("none", "psumquant"), resnet_epochs=1, resnet_train=192, resnet_arrays=(128,), resnet_eval=12,
    resnet_probe=4,
    lm_arrays=(128,), lm_steps=30, lm_eval_seqs=32,
    lm_model={"hidden": 128, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 256, "ctx": 64},
)


def parse_list(text: str, what: str, allowed: Sequence[Any], conv: Callable[[str], Any]) -> tuple[Any, ...]:
    """A comma-separated CLI list checked against ``allowed``; raises ConfigError naming the bad item."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--{what} is empty; give a comma-separated list from {', '.join(map(str, allowed))}")
    out = []
    for t in items:
        try:
            v = conv(t)
        except ValueError:
            v = None
        if v not in allowed:
            raise ConfigError(f"--{what}: '{t}' is not one of {', '.join(map(str, allowed))}")
        out.append(v)
    return tuple(dict.fromkeys(out))


def make_plan(quick: bool, policies: str | None = None, bits: str | None = None,
              resnet_images: int | None = None, families: str | None = None) -> Plan:
    """The quick or full plan, with optional ``--policies`` / ``--psum-buffer-bits`` / ``--resnet-images`` /
    ``--families`` overrides (none is always kept as the reference)."""
    from ._policy import POLICIES

    plan = QUICK if quick else FULL
    if families is not None:
        fams = parse_list(families, "families", FAMILIES, str)
        plan = replace(plan, families=tuple(f for f in FAMILIES if f in fams))
    if policies is not None:
        pol = parse_list(policies, "policies", POLICIES, str)
        pol = pol if "none" in pol else ("none", *pol)
        plan = replace(plan, policies=pol, minilm_policies=None, minilm_float_policies=None, minilm_token_policies=None,
                       minilm_attn_policies=None)
    if bits is not None:
        b = parse_list(bits, "psum-buffer-bits", ALL_BITS, int)
        plan = replace(plan, bits=b, minilm_bits=None)
    if resnet_images is not None:
        plan = replace(plan, resnet_eval=resnet_images)
    return plan


def plan_of(config: Any) -> Plan:
    """The plan of a :class:`~npukit.experiments.psumquant.Config` (its policy/bit subsets applied)."""
    families = getattr(config, "families", None)
    return make_plan(config.quick, ",".join(config.policies) if config.policies else None,
                     ",".join(map(str, config.bits)) if config.bits else None, getattr(config, "resnet_images", None),
                     ",".join(families) if families else None)


def _pairs(policies: Sequence[str], bits: Sequence[int]) -> list[tuple[str, int]]:
    """(policy, bits) to evaluate: 'none' once (it ignores bits), every other policy at every width."""
    return ([("none", bits[0])] if "none" in policies else []) + [(p, b) for p in policies if p != "none" for b in bits]


def run_digits(plan: Plan, progress: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Digits CNN top-1 per (array, policy, bits)."""
    from . import _digits

    data = _digits.load_data()
    model, how = _digits.train_or_load(data, plan.digits_epochs, progress)
    n = min(plan.digits_eval or len(data.y_test), len(data.y_test))
    data = _digits.DigitsData(data.x_train, data.y_train, data.x_test[:n], data.y_test[:n])
    float_top1 = _digits.top1(model, data.x_test, data.y_test)
    log(f"digits CNN ({plan.digits_epochs} epochs, {how}): float32 top-1 {float_top1:.4f} on {n} test images")
    return _vision_rows("digits-cnn", model, data, float_top1, n, plan.digits_arrays, plan, progress)


def run_resnet(plan: Plan, progress: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Full-width ResNet-18 on the digits at 32x32: top-1 per (array, policy, bits) on the first
    ``plan.resnet_eval`` test images (the float top-1 on all of them too)."""
    from . import _digits, _resnet

    data = _digits.load_data(_resnet.SIZE)
    model, how = _resnet.train_or_load(data, plan.resnet_epochs, progress, plan.resnet_train)
    float_all = _digits.top1(model, data.x_test, data.y_test)
    n = min(plan.resnet_eval, len(data.y_test))
    float_top1 = _digits.top1(model, data.x_test[:n], data.y_test[:n])
    log(f"ResNet-18 (64-512 channels, digits at 32x32, {plan.resnet_epochs} epochs, {how}): float32 top-1 "
        f"{float_all:.4f} on all {len(data.y_test)} test images, {float_top1:.4f} on the {n} evaluated with psums")
    sub = _digits.DigitsData(data.x_train, data.y_train, data.x_test[:n], data.y_test[:n])
    rows = _vision_rows("resnet18", model, sub, float_top1, n, plan.resnet_arrays, plan, progress,
                        probe_images=min(plan.resnet_probe, n))
    for r in rows:
        r["float_top1_all"] = float_all
    return rows


def _vision_rows(name: str, model: Any, data: Any, float_top1: float, n_test: int, arrays: Sequence[int], plan: Plan,
                 progress: bool, probe_images: int = 0) -> list[dict[str, Any]]:
    """Top-1 and logit SQNR per (array, policy, bits); with ``probe_images``, also the per-layer psum
    SQNR (``_sqnr.LayerProbe`` on the first that many test images): mean and minimum over the layers."""
    from tqdm import tqdm

    from . import _digits, _noise
    from ._policy import PsumSweep
    from ._sqnr import LayerProbe, sqnr_db

    nan = float("nan")
    calib = _digits.calib_batches(data, plan.digits_calib)
    rows: list[dict[str, Any]] = []
    pairs = _pairs(plan.policies, plan.bits)
    bar = tqdm(total=len(pairs) * len(arrays), desc=f"{name}: policies x bits", disable=not progress, leave=False)
    for r in arrays:
        sweep = PsumSweep(model, r, calib, calib_rows=plan.calib_rows)
        probe = LayerProbe(sweep, data.x_test[:probe_images]) if probe_images else None
        ref = None
        correct: dict[tuple[str, int], Any] = {}  # per-image 0/1 of each (policy, bits): the paired bootstrap
        for pol, b in pairs:
            z = _digits.logits(sweep.set(pol, b), data.x_test)
            ref = z if pol == "none" else ref
            acc = _digits.accuracy(z, data.y_test)
            correct[pol, b] = (z.argmax(dim=1) == data.y_test).float()
            none_c, static_c = correct.get(("none", plan.bits[0])), correct.get(("static", b))
            d_lo, d_hi = _noise.mean_diff_interval(correct[pol, b], none_c) if none_c is not None else (nan, nan)
            s_lo, s_hi = (_noise.mean_diff_interval(correct[pol, b], static_c) if static_c is not None and pol != "static"
                          else (nan, nan))
            fit = sweep.fit_figures()
            layer = [x["sqnr_db"] for x in probe.rows()] if probe is not None and pol != "none" else []
            for bb in (plan.bits if pol == "none" else (b,)):  # 'none' does not depend on bits: evaluated once
                rows.append({"model": name, "policy": pol, "bits": bb, "array": f"{r}x{r}", "rows": r, "top1": acc,
                             "float_top1": float_top1, "n_test": n_test,
                             # the whole net's output error: logits against 32-bit psums on the same array (dB)
                             "logit_sqnr_db": sqnr_db(ref, z) if ref is not None else float("nan"),
                             # psum error layer by layer, each on its 32-bit-psum input (dB): mean, worst layer
                             "layer_sqnr_mean_db": sum(layer) / len(layer) if layer else float("nan"),
                             "layer_sqnr_min_db": min(layer) if layer else float("nan"),
                             "range_mae_log2": fit["range_mae_log2"], "clip_frac": fit["clip_frac"],
                             # 95% paired bootstrap intervals over the test images: top-1 minus policy none's,
                             # and minus policy static's at the same bits
                             "delta_top1_lo": d_lo, "delta_top1_hi": d_hi,
                             "minus_static_lo": s_lo, "minus_static_hi": s_hi})
            bar.update(1)
    bar.close()
    _add_delta(rows, "top1", "delta_top1")
    return rows


def _minilm_settings(plan: Plan) -> list[tuple[str, int | None, str, bool, list[tuple[str, int]]]]:
    """(wa, wa_bits, act_granularity, attention on the array, (policy, bits) pairs) per MiniLM setting."""
    policies = plan.minilm_policies or plan.policies
    bits = plan.minilm_bits or plan.bits

    def pick(p: tuple[str, ...] | None) -> tuple[str, ...]:
        return policies if p is None else tuple(x for x in p if x in policies or x == "none")

    out = [("int8", 8, "tensor", False, _pairs(policies, bits))]
    for wa, wab, gran, attn, pol in (("int8-token", 8, "token", False, pick(plan.minilm_token_policies)),
                                     ("int8-token", 8, "token", True, pick(plan.minilm_attn_policies)),
                                     ("fp32", None, "tensor", False, pick(plan.minilm_float_policies))):
        if pol:  # () skips the setting
            out.append((wa, wab, gran, attn, _pairs(pol, bits)))
    return out


def run_minilm(plan: Plan, progress: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """MiniLM embedding cosine / Spearman per (array, weight/activation setting, attention, policy, bits).

    Settings (column ``wa``): ``int8`` (the experiment's int8 per-channel weights and int8
    per-tensor activations; int8 alone, policy ``none``, already costs ~0.02 cosine on MiniLM, so no
    psum policy can reach 0.99 there), ``int8-token`` (int8 per-token activations, as LLM int8
    deployments use; evaluated with the attention matmuls off and on the array, column ``attention``)
    and ``fp32`` (float32 weights/activations, only the psums quantized: the psum bit-width effect
    the paper claims on its own)."""
    import torch
    from tqdm import tqdm

    from npukit.models import corpus as _corpus
    from npukit.models import minilm as _minilm

    from ._noise import mean_interval
    from ._policy import PsumSweep

    model, tok = _minilm.load_minilm()
    sents = _corpus.sentences(plan.minilm_sentences, max_words=plan.minilm_max_words)
    calib_s = _corpus.sentences(plan.minilm_calib, skip=plan.minilm_sentences, max_words=plan.minilm_max_words)
    order = sorted(range(len(sents)), key=lambda i: len(sents[i]))  # less padding per batch
    sents = [sents[i] for i in order]
    packed = _minilm.batches(tok, sents)
    ref = _minilm.embed(model, packed)
    log(f"MiniLM: {len(sents)} sentences from the python3-doc corpus ({_corpus.docs_root()}), "
        f"{len(calib_s)} more for calibration")
    bits = plan.minilm_bits or plan.bits
    settings = _minilm_settings(plan)
    rows: list[dict[str, Any]] = []
    total = sum(len(s[-1]) for s in settings) * len(plan.minilm_arrays)
    bar = tqdm(total=total, desc="MiniLM: policies x bits", disable=not progress, leave=False)
    for r, (wa, wa_bits, gran, attn, pairs) in ((r, s) for r in plan.minilm_arrays for s in settings):
        sweep = PsumSweep(model, r, _minilm.batches(tok, calib_s), calib_rows=min(512, plan.calib_rows), wa_bits=wa_bits,
                          act_granularity=gran, matmuls=attn)
        base = None
        for pol, b in pairs:
            emb = _minilm.embed(sweep.set(pol, b), packed)
            base = emb if pol == "none" else base
            cos, cos_min, rho = _minilm.compare(ref, emb)
            cos_lo, cos_hi = mean_interval(torch.nn.functional.cosine_similarity(ref, emb, dim=1))
            # the psum effect alone: against the same model (int8 or fp32 weights/activations) with unquantized psums
            cos_n, _, rho_n = _minilm.compare(base, emb) if base is not None else (float("nan"), 0.0, float("nan"))
            fit = sweep.fit_figures()
            for bb in (bits if pol == "none" else (b,)):  # 'none' does not depend on bits: evaluated once
                rows.append({"model": "all-MiniLM-L6-v2", "policy": pol, "bits": bb, "array": f"{r}x{r}", "rows": r, "wa": wa,
                             "attention": "psum" if attn else "fp32",
                             "cosine": cos, "cosine_lo": cos_lo, "cosine_hi": cos_hi, "cosine_min": cos_min,
                             "spearman": rho, "cosine_vs_none": cos_n,
                             "spearman_vs_none": rho_n, "n_sentences": len(sents),
                             "range_mae_log2": fit["range_mae_log2"], "clip_frac": fit["clip_frac"]})
            bar.update(1)
    bar.close()
    return rows


def train_or_load_lm(plan: Plan, progress: bool) -> tuple[Any, Any, str]:
    """(corpus, the byte-level Llama of ``plan`` trained for ``plan.lm_steps`` steps, how): weights cached
    under a name encoding sizes, steps and corpus size (see ``_cache.py``)."""
    from npukit.models import byte_llama as bl

    from ._cache import load_state, save_state

    spec = bl.ByteLlamaSpec(**plan.lm_model)
    corpus = bl.load_corpus(plan.lm_corpus_bytes)
    name = f"{spec.tag()}_b{plan.lm_corpus_bytes}_s{plan.lm_steps}_v1.pt"
    model = bl.byte_llama(spec)
    state = load_state(name)
    if state is not None:
        try:
            model.load_state_dict(state)
            return corpus, model.eval(), "cached"
        except (RuntimeError, KeyError, TypeError, ValueError, AttributeError):  # stale or damaged: retrain
            pass
    res = bl.train_lm(model, corpus, plan.lm_steps, spec.ctx, batch=32, lr=2e-3, eval_every=plan.lm_steps,
                      eval_seqs=32, progress=progress)
    save_state(name, model.state_dict())
    return corpus, model.eval(), f"trained in {res['seconds']:.0f} s"


def window_nll(model: Any, batches: list[Any]) -> Any:
    """Mean next-byte cross-entropy (nats/byte) of every held-out window [B, ctx+1] of ``batches``, a
    tensor [windows]; its mean is the log of :func:`npukit.models.byte_llama.perplexity` (equal-length windows)."""
    import torch
    import torch.nn.functional as F

    out = []
    with torch.no_grad():
        for b in batches:
            z = model(b[:, :-1])
            z = z.logits if hasattr(z, "logits") else z
            ce = F.cross_entropy(z.reshape(-1, z.shape[-1]).float(), b[:, 1:].reshape(-1), reduction="none")
            out.append(ce.view(len(b), -1).mean(dim=1))
    return torch.cat(out)


def run_lm(plan: Plan, progress: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Byte-level Llama perplexity per (array, policy, bits)."""
    from tqdm import tqdm

    from npukit.models import byte_llama as bl

    from ._noise import ppl_diff_interval
    from ._policy import PsumSweep

    spec = bl.ByteLlamaSpec(**plan.lm_model)
    corpus, model, how = train_or_load_lm(plan, progress)
    evalb = bl.eval_windows(corpus, spec.ctx, plan.lm_eval_seqs)
    float_ppl = bl.perplexity(model, evalb)
    name = spec.tag()
    log(f"byte-level Llama {name} ({plan.lm_steps} steps, {how}; {len(corpus.train):,} training bytes of python3-doc "
        f"prose): float32 held-out perplexity {float_ppl:.3f} per byte (stands in for the paper's Llama-3.1)")
    calib = bl.calib_windows(corpus, spec.ctx)
    pairs = _pairs(plan.policies, plan.bits)
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(pairs) * len(plan.lm_arrays), desc="byte Llama: policies x bits", disable=not progress,
               leave=False)
    for r in plan.lm_arrays:
        sweep = PsumSweep(model, r, calib, calib_rows=min(512, plan.calib_rows))
        ref_nll = None
        for pol, b in pairs:
            nll = window_nll(sweep.set(pol, b), evalb)
            ppl = math.exp(float(nll.mean()))
            ref_nll = nll if pol == "none" else ref_nll
            lo, hi = ppl_diff_interval(nll, ref_nll) if ref_nll is not None else (math.nan, math.nan)
            fit = sweep.fit_figures()
            for bb in (plan.bits if pol == "none" else (b,)):
                rows.append({"model": name, "policy": pol, "bits": bb, "array": f"{r}x{r}", "rows": r, "ppl": ppl,
                             "float_ppl": float_ppl, "n_eval_bytes": sum(x[:, 1:].numel() for x in evalb),
                             "n_eval_windows": len(nll),
                             "range_mae_log2": fit["range_mae_log2"], "clip_frac": fit["clip_frac"],
                             # 95% paired bootstrap interval of delta_ppl over the held-out windows
                             "delta_ppl_lo": lo, "delta_ppl_hi": hi, "stands_in_for": "Llama-3.1 (paper)"})
            bar.update(1)
    bar.close()
    _add_delta(rows, "ppl", "delta_ppl")
    return rows


def _add_delta(rows: list[dict[str, Any]], key: str, out_key: str) -> None:
    """``out_key`` = row[key] - the 'none' row's value on the same array (first such row)."""
    ref = {}
    for r in rows:
        if r["policy"] == "none":
            ref.setdefault(r["array"], r[key])
    for r in rows:
        r[out_key] = r[key] - ref[r["array"]] if r["array"] in ref else float("nan")


def _family_job(job: tuple[str, Plan, bool, Callable[[str], None] | None]) -> tuple[str, list[dict[str, Any]], float]:
    """One model family of the plan (seeded alike wherever it runs): ``(family, rows, seconds)``."""
    import torch

    fam, plan, progress, log = job
    fn = {"digits": run_digits, "resnet18": run_resnet, "minilm": run_minilm, "lm": run_lm}[fam]
    torch.manual_seed(0)
    t = time.perf_counter()
    rows = fn(plan, progress, log or print)
    return fam, rows, time.perf_counter() - t


def run_experiment(out_dir: str | Path, plan: Plan = FULL, progress: bool = True,
                   log: Callable[[str], None] = print, executor: Any = None, arch: str = "npu128") -> list[Path]:
    """Run every family of ``plan``, write CSVs, plots and ``summary.md`` into ``out_dir``; returns
    the written paths. ``executor``: run the families as jobs on it (e.g. a Dask executor); default:
    one after another in this process. ``arch``: the NPU arch (name or file) of the energy table."""
    from npukit.sim import load_arch, prepare_out_dir

    from . import _energy, _report

    out = prepare_out_dir(out_dir)
    t0 = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {}
    timings: dict[str, float] = {}
    if executor is None:
        for fam in plan.families:
            _, results[fam], timings[fam] = _family_job((fam, plan, progress, log))
    else:  # one job per family on the executor of --scheduler / --dask-local ; rows come back whole
        for fam, rows, secs in executor.map(_family_job, [(fam, plan, False, None) for fam in plan.families]):
            results[fam], timings[fam] = rows, secs
    t = time.perf_counter()
    npu = load_arch(arch)
    results["energy"] = _energy.energy_rows(npu)
    timings["energy"] = time.perf_counter() - t
    assumptions = _energy.assumptions(npu)
    log("energy assumptions:")
    for line in assumptions:
        log(f"  {line}")
    log(_report.energy_headline(results["energy"]))
    paths = _report.write_all(out, results, assumptions, plan, timings)
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return paths


def run_energy_only(out_dir: str | Path, log: Callable[[str], None] = print, arch: str = "npu128") -> list[Path]:
    """The NPU energy table alone on ``arch`` (no model is trained): ``energy.csv``, ``energy_assumptions.txt``,
    ``energy_breakdown.png`` and ``energy_summary.md`` in ``out_dir``; returns the written paths."""
    from npukit.sim import load_arch, markdown_table, prepare_out_dir, write_csv, write_text

    from . import _energy, _report

    out = prepare_out_dir(out_dir)
    npu = load_arch(arch)
    rows = _energy.energy_rows(npu)
    assumptions = _energy.assumptions(npu)
    log("energy assumptions:")
    for line in assumptions:
        log(f"  {line}")
    head = _report.energy_headline(rows)
    log(head)
    table = markdown_table(
        ["workload", "mapping", "psum bits", "total (uJ)", "on-chip (uJ)", "reduction", "on-chip reduction"],
        [[r["workload"], r["mapping"], r["bits"], f"{r['energy_total_pj'] / 1e6:,.1f}", f"{r['energy_onchip_pj'] / 1e6:,.1f}",
          f"{100 * r['reduction_vs_32']:.1f}%", f"{100 * r['reduction_onchip_vs_32']:.1f}%"] for r in rows])
    md = "\n".join(["# PsumQuant energy table (npukit experiment psumquant --energy-only)", "", head, "", table, "",
                    "Assumptions:", "", *[f"- {a.strip()}" for a in assumptions], ""])
    paths = [write_csv(out / "energy.csv", rows),
             write_text(out / "energy_assumptions.txt", "\n".join(assumptions) + "\n"),
             _report.plot_energy(rows, out / "energy_breakdown.png"),
             write_text(out / "energy_summary.md", md)]
    for p in paths:
        log(f"wrote {p}")
    return paths


def digits_demo_summary(out_dir: str | Path, epochs: int = FULL.digits_epochs) -> str:
    """Digits CNN top-1 on a 128x128 array with 32-bit (unquantized) psums vs 8-bit ``psumquant``
    psums, as a few lines of text for ``npukit demo``; also writes ``digits_psum.csv`` to ``out_dir``.
    Loads the CNN the full experiment caches (or trains it: ``epochs`` epochs, well under a minute on
    an idle 2-core machine)."""
    from npukit.sim import prepare_out_dir, write_csv

    from . import _digits
    from ._policy import PsumSweep

    out = prepare_out_dir(out_dir)
    data = _digits.load_data()
    model, how = _digits.train_or_load(data, epochs, progress=False)
    sweep = PsumSweep(model, 128, _digits.calib_batches(data, 128), calib_rows=512)
    rows = []
    for pol, b in (("none", 32), ("psumquant", 8)):
        acc = _digits.top1(sweep.set(pol, b if b < 32 else 8), data.x_test, data.y_test)
        rows.append({"model": "digits-cnn", "policy": pol, "bits": b, "array": "128x128", "top1": acc})
    path = write_csv(Path(out) / "digits_psum.csv", rows)
    a32, a8 = (r["top1"] for r in rows)
    return "\n".join([
        f"digits CNN (sklearn digits, {len(data.y_test)} test images; weights {how}), int8 weights/activations, 128x128 array:",
        f"  32-bit psums (policy none)   top-1 {100 * a32:.2f}%",
        f"  8-bit psums, psumquant       top-1 {100 * a8:.2f}% ({100 * (a8 - a32):+.2f} points)",
        f"wrote {path}",
    ])

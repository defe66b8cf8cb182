"""PsumQuant: run a PyTorch model as a tiled weight-stationary systolic array with B-bit psums.

Every ``nn.Linear`` and ``nn.Conv2d`` (as im2col GEMM; grouped convs per group) becomes the GEMM
``y = x @ w`` (x: M x K, one row per token / output pixel; w: K x N) on an R x C array: K is cut
into K-tiles of R rows, N into N-tiles of C columns, and each K-tile's psums are quantized to B
bits with a scale (a "step", psum units per LSB) before they enter the psum path:

* ``semantics='buffer'`` (default; what cuts psum-buffer energy): the buffer holds B bits; the
  running sum is re-quantized after every accumulation: ``acc <- ovf_B(acc + q(p_t))`` with one step
  per output row and N-tile for all K-tiles (this is ``npukit.sim.cycle.run_gemm(psum_buffer_bits=B,
  quant=(mult, shift))``).
* ``semantics='transfer'``: each K-tile psum is quantized (compressed psum transfer) with its own
  step per (row, K-tile, N-tile); accumulation stays at high precision.

``overflow``: ``saturate`` or ``wrap`` (two's complement) of the B-bit accumulator (buffer), or of
the B-bit quantizer output (transfer; the contract's quantizer saturates, ``wrap`` models one
without saturation logic).

Number systems: with ``wa_bits=8`` (default) weights are int8 symmetric per output channel and
activations int8 symmetric per tensor (scale from calibration), so psums are integers ("integer
psum units"); ``act_granularity='token'`` gives every row of x (token) its own dynamic activation
scale instead (as LLM int8 deployments do; psums stay integers per row, see
:class:`PsumQuantConfig`); with ``wa_bits=None`` weights and activations stay float32 and only psums are
quantized. ``exact=True`` runs the integer-exact path (NumPy int64, the shared quantizer of
:mod:`npukit.sim.quant`; bit for bit ``run_gemm``); the default float path (float32 torch, or the
Triton kernel on CUDA) gives identical results for power-of-two steps when B <= 22 and K-tile psums
stay below 2^24 (int8 data, R <= 1024), and agrees within one LSB per K-tile otherwise.

Scale policies: see :mod:`npukit.models.psumquant._policies` (none, static, tile-max, a2q, sigma,
psumquant); the psumquant predictor: :mod:`npukit.models.psumquant._predictor`.

This module is the model-level API (convert, calibrate, reconfigure, ...); the config lives in
:mod:`npukit.models.psumquant._config`, the converted modules in :mod:`npukit.models.psumquant._layer` and the
traffic ledger in :mod:`npukit.models.psumquant._traffic` (all re-exported here).

Activation x activation products (attention ``QK^T`` and ``PV``): a model marks them with
:class:`Matmul` slots (transformers models get them through transformers' attention interface, see
:mod:`npukit.models.psumquant._hf`); ``convert(..., matmuls=True)`` turns those into :class:`PsumMatmul` modules,
calibrated with the layers and using every policy (:mod:`npukit.models.psumquant._matmul`).
:func:`psum_matmul` is the functional, calibration-free form.

Typical use::

    cfg = PsumQuantConfig(rows=128, psum_buffer_bits=8, policy="psumquant")
    qmodel = convert(copy.deepcopy(model), cfg, calib_batches)   # swap + calibrate
    reconfigure(qmodel, policy="static", psum_buffer_bits=6)              # refit from stored stats, no data pass
    fit_report(qmodel)                                            # per-layer fit figures
    qattn = convert(copy.deepcopy(bert), cfg, calib, matmuls=True)  # also its Matmul slots (attention)
    with PsumTraffic(qmodel) as tr: qmodel(x)
    tr.record(ledger)                                             # psum reads/writes at B bits
    model = unconvert(qmodel)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from npukit.kernels.psumquant import psumquant_matmul
from npukit.sim.datapath import PSUMQUANT_ALIASES, rename

from . import _hf
from ._config import GEOMETRY_FIELDS, PsumQuantConfig, PsumQuantError
from ._exec import CalibStats, Geom, hw_steps, int_tiled_gemm
from ._layer import NO_FEATURES, PsumMatmul, PsumQuantLayer, converted, convertible, psum_layers, psum_matmuls
from ._matmul import Matmul, MatmulStats, quantize_operands
from ._policies import POLICIES, FitContext, make_policy
from ._traffic import PsumTraffic

__all__ = [
    "POLICIES",
    "Matmul",
    "PsumMatmul",
    "PsumQuantConfig",
    "PsumQuantError",
    "PsumQuantLayer",
    "PsumTraffic",
    "calibrate",
    "convert",
    "fit_report",
    "psum_layers",
    "psum_matmul",
    "psum_matmuls",
    "reconfigure",
    "unconvert",
]


# ---------------------------------------------------------------------------------- model-level API
def convert(
    model: nn.Module,
    config: PsumQuantConfig | None = None,
    calib_batches: Iterable[Any] | None = None,
    skip: Iterable[str] = (),
    matmuls: bool = False,
) -> nn.Module:
    """Swap every ``nn.Linear`` / ``nn.Conv2d`` of ``model`` (in place; the root too) for a
    :class:`PsumQuantLayer`, and with ``matmuls=True`` every :class:`Matmul` slot (attention
    products) for a :class:`PsumMatmul`; a transformers model (anywhere in ``model``) first gets a slot
    pair for ``QK^T`` / ``PV`` on each attention module and the ``"npukit_psum"`` attention
    implementation (:mod:`npukit.models.psumquant._hf`; no model code is patched, :func:`unconvert` restores
    it). Then calibrate on ``calib_batches`` when given. ``skip``:
    qualified names of modules to leave alone. Returns the converted model (the same object unless the root
    itself is a Linear/Conv2d). Raises :class:`PsumQuantError` if nothing can be converted."""
    config = config or PsumQuantConfig()
    if not isinstance(config, PsumQuantConfig):
        raise PsumQuantError(f"config must be a PsumQuantConfig, got {type(config).__name__}")
    if not isinstance(model, nn.Module):
        raise PsumQuantError(f"convert needs a torch.nn.Module, got {type(model).__name__}")
    skip = set(skip)
    if not isinstance(matmuls, bool):
        raise PsumQuantError(f"matmuls must be True or False, got {matmuls!r}")
    if converted(model):
        raise PsumQuantError("the model is already converted: use reconfigure(model, ...) or unconvert(model) first")
    if convertible(model):
        model = PsumQuantLayer(model, config, "")
    else:
        if matmuls:  # transformers models: Matmul slots on their attention modules, our attention implementation
            _hf.install(model)
        targets = [(n, m) for n, m in model.named_modules()
                   if n and (convertible(m) or (matmuls and isinstance(m, Matmul))) and n not in skip]
        if not targets:
            what = "nn.Linear, nn.Conv2d or Matmul" if matmuls else "nn.Linear or nn.Conv2d"
            raise PsumQuantError(f"{type(model).__name__} has no {what} layer to convert")
        for name, mod in targets:
            parent, _, leaf = name.rpartition(".")
            new = PsumMatmul(mod, config, name) if isinstance(mod, Matmul) else PsumQuantLayer(mod, config, name)
            setattr(model.get_submodule(parent) if parent else model, leaf, new)
    if calib_batches is not None:
        calibrate(model, calib_batches)
    return model


def unconvert(model: nn.Module) -> nn.Module:
    """Put every original module back (the very objects that were converted); returns the model."""
    if isinstance(model, PsumQuantLayer):
        return model.orig
    for name, layer in converted(model):
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, layer.orig)
    _hf.uninstall(model)
    return model


def _run_batches(model: nn.Module, batches: list[Any]) -> None:
    for b in batches:
        if isinstance(b, dict):
            model(**b)
        elif isinstance(b, tuple | list):
            model(*b)
        else:
            model(b)


def calibrate(model: nn.Module, calib_batches: Iterable[Any]) -> nn.Module:
    """Run the calibration batches through the (fp32) model to fit every converted layer: the
    per-tensor activation scales (pass 1, when ``wa_bits`` is set), then the psum statistics and the
    policy fits (pass 2). Network weights are never changed. A batch is a tensor (``model(b)``), a
    tuple/list (``model(*b)``) or a dict (``model(**b)``). Returns the model."""
    layers = psum_layers(model)
    mms = psum_matmuls(model)
    if not layers and not mms:
        raise PsumQuantError("calibrate: the model has no converted layer; call convert(model, config) first")
    batches = list(calib_batches)
    if not batches:
        raise PsumQuantError("calibrate: calib_batches is empty; pass at least one batch of real inputs")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if any(layer.config.wa_bits is not None and layer.config.act_granularity == "tensor" for _, layer in layers):
                for _, layer in layers:
                    layer.mode, layer.act_absmax = "observe_act", 0.0
                for _, mm in mms:
                    mm.mode = "fp32"  # pass 1 runs the fp32 model
                _run_batches(model, batches)
            for _, layer in layers:
                layer.mode = "observe_psum"
                layer._fit_cache = {}
                layer.stats = [CalibStats(layer.geom) for _ in range(layer.groups)]
            for _, mm in mms:
                mm.mode, mm._fit_cache, mm.stats = "observe_psum", {}, MatmulStats()
            _run_batches(model, batches)
    finally:
        for _, layer in [*layers, *mms]:
            layer.mode = "run"
        model.train(was_training)
    for name, layer in layers:
        if layer.stats and layer.stats[0].batches == 0:
            raise PsumQuantError(f"calibrate: layer '{name}' was never reached by the calibration batches")
        layer._build_policies()
    for name, mm in mms:
        if mm.stats is not None and mm.stats.batches == 0:
            raise PsumQuantError(f"calibrate: matmul '{name}' was never reached by the calibration batches")
        mm._build_policies()
    return model


def reconfigure(model: nn.Module, **changes: Any) -> nn.Module:
    """Change config fields of every converted layer and refit its policy from the stored calibration
    statistics (no data pass): e.g. ``reconfigure(m, policy='static', psum_buffer_bits=6, semantics='transfer')``.
    ``rows``, ``cols`` and ``wa_bits`` change the tiling or the number system: convert again."""
    layers = converted(model)
    if not layers:
        raise PsumQuantError("reconfigure: the model has no converted layer; call convert(model, config) first")
    changes = rename(changes, PSUMQUANT_ALIASES, "reconfigure")
    bad = [k for k in changes if k in GEOMETRY_FIELDS]
    if bad:
        raise PsumQuantError(f"reconfigure cannot change {', '.join(bad)}: unconvert and convert again with a new config")
    unknown = [k for k in changes if k not in PsumQuantConfig.__dataclass_fields__]
    if unknown:
        raise PsumQuantError(f"reconfigure: unknown config field(s) {', '.join(unknown)}")
    for _, layer in layers:
        layer.config = replace(layer.config, **changes)
        layer._build_policies()
    return model


def fit_report(model: nn.Module) -> dict[str, dict[str, Any]]:
    """Per converted layer: its policy's :meth:`fit_report` (group 0 for grouped convs) plus the
    geometry; per converted matmul (``kind: 'matmul'``): its policy's report. For ``psumquant`` it
    includes the predictor's MAE/RMSE/max error (log2 units) on the calibration tiles, the chosen margin and the coefficients."""
    out: dict[str, dict[str, Any]] = {}
    for name, layer in psum_layers(model):
        g = layer.geom
        rep = layer.policies[0].fit_report() if layer.policies else {}
        rep.update({"K": g.K, "N": g.N, "k_tiles": g.kf, "n_tiles": g.nt, "groups": layer.groups, "config": asdict(layer.config)})
        out[name or "<root>"] = rep
    for name, mm in psum_matmuls(model):  # shapes vary per call: no geometry
        out[name] = {**mm.policy.report, "config": asdict(mm.config)}
    return out


# ---------------------------------------------------------------------------------- functional matmul
def psum_matmul(a: torch.Tensor, b: torch.Tensor, config: PsumQuantConfig | None = None) -> torch.Tensor:
    """Psum-quantized ``a @ b`` for activation x activation products (attention), opt-in.

    ``a``: (..., M, K), ``b``: (..., K, N) with equal batch dims. Only calibration-free policies:
    ``none``, ``tile-max`` (oracle) and ``a2q`` (bound from the actual max |a|); for calibrated
    policies put a :class:`Matmul` slot in the model and ``convert(..., matmuls=True)``. With
    ``wa_bits`` both operands are quantized from their own max (dynamic): per tensor, or per row of
    ``a`` and column of ``b`` with ``act_granularity='token'``. Returns float32."""
    config = config or PsumQuantConfig(policy="tile-max")
    if config.policy not in ("none", "tile-max", "a2q"):
        raise PsumQuantError(
            f"psum_matmul supports the calibration-free policies none, tile-max and a2q, not '{config.policy}'; "
            "for calibrated policies use a Matmul slot and convert(model, config, calib, matmuls=True)"
        )
    if a.dim() < 2 or b.dim() < 2 or a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
        raise PsumQuantError(
            f"psum_matmul needs (..., M, K) and (..., K, N) with equal batch dims, got {tuple(a.shape)}, {tuple(b.shape)}"
        )
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        raise PsumQuantError("psum_matmul got NaN or infinite inputs")
    with torch.no_grad():
        a, b, scale = quantize_operands(a, b, config.wa_bits, config.act_granularity)
        batch = a.shape[:-2]
        a3 = a.reshape(-1, *a.shape[-2:])
        b3 = b.reshape(-1, *b.shape[-2:])
        outs = []
        for i in range(a3.shape[0]):
            outs.append(_matmul_one(a3[i], b3[i], config))
        y = torch.stack(outs).reshape(*batch, a.shape[-2], b.shape[-1])
    return y * scale


def _matmul_one(a: torch.Tensor, b: torch.Tensor, c: PsumQuantConfig) -> torch.Tensor:
    if c.policy == "none":
        return a @ b
    g = Geom(a.shape[1], b.shape[1], c.rows, c.cols)
    pol = make_policy(c.policy)
    xb = float(a.abs().max()) if c.wa_bits is None else 2.0 ** (c.wa_bits - 1) - 1
    ctx = FitContext(g=g, w=b, semantics=c.semantics, bits=c.psum_buffer_bits, integer=c.integer, x_bound=xb,
                     scale_form=c.scale_form, overflow=c.overflow)
    pol.fit(ctx)
    inv, mult, shift = hw_steps(pol.log2_step(a, NO_FEATURES, ctx), c.scale_form, c.integer, pol.rounding)
    if c.exact:
        res = int_tiled_gemm(a.cpu().numpy().astype(np.int64), b.cpu().numpy().astype(np.int64), c.rows, c.cols,
                             c.psum_buffer_bits,
                             mult.numpy(), shift.numpy(), c.semantics, c.overflow, c.pe_psum_bits)
        return torch.from_numpy(res.value).float()
    return psumquant_matmul(a, b, inv.to(a.device), c.rows, c.cols, c.psum_buffer_bits, c.semantics, c.overflow, c.backend)

"""NPU cost (cycles, pJ) of FLUX.1 Kontext-dev editing rounds, full vs CacheEdit, through :func:`npukit.sim.simulate`.

The full step is the whole-model workload ``flux.1-kontext-dev:res=1024,steps=1`` (diffusers'
``FluxTransformer2DModel`` traced on the meta device: GEMMs and vector ops; 4096 target + 4096 context-image
tokens, 512 text tokens). A CacheEdit sparse step (``context_image='cache'``) runs the text rows and ``a``
active target rows through every block while the attention keeps all 8704 keys: it is derived from the full
step's trace by scaling the row count of each operator -- GEMMs with M = 8192 (image stream) to ``a``,
M = 8704 (joint rows: single-stream blocks, attention queries) to ``512 + a``, text rows (M = 512) and
per-sample rows (M = 1) unchanged; the attention's key dimension unchanged; vector ops by their element
count the same way (``8704 * w`` joint, ``8192 * w`` image, for the model's widths ``w``; the softmax over
``24 x 8704 x 8704`` scores to ``24 x (512 + a) x 8704``). The gather / scatter of rows and the cached K/V
reads are not modelled (estimate). A round: full recomputation runs 28 full steps; CacheEdit runs the
identity-reference call and call 0 at full width and 27 sparse steps.

On a multi-core arch (a preset such as ``quad128``, a ``.toml`` with ``[[core]]`` tables, ``stream:CHIP.yaml``) each
step runs through :func:`npukit.sim.simulate_multicore` under the chip's schedule search, chosen anew for the full
and for each sparse step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

SPEC = "flux.1-kontext-dev:res=1024,steps=1"
TARGET, IMG, TXT = 4096, 8192, 512
JOINT = IMG + TXT
HEADS = 24
WIDTHS = (64, 128, 3072, 9216, 12288, 15360, 18432, 21504, HEADS * 128)
SWEEP = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)


def sparse_step(wl: Any, active: int) -> Any:
    """The full-step workload ``wl`` with ``active`` target rows computed (see the module docstring)."""
    from npukit.sim.workload import Layer, Workload

    rows = TXT + active
    out = []
    for op in wl.layers:
        if isinstance(op, Layer):
            m = op.M
            if m == IMG:
                m = active
            elif m == JOINT:
                m = rows
            out.append(dataclasses.replace(op, M=max(1, m)))
            continue
        e = op.elements
        if e == HEADS * JOINT * JOINT:
            e = HEADS * rows * JOINT
        elif e % JOINT == 0 and e // JOINT in WIDTHS:
            e = rows * (e // JOINT)
        elif e % IMG == 0 and e // IMG in WIDTHS:
            e = max(1, active) * (e // IMG)
        out.append(dataclasses.replace(op, elements=max(1, e)))
    return Workload(f"{wl.name}_sparse{active}", out, meta=dict(wl.meta))


def kontext_cost(measured: float, arch_name: str = "npu128", steps: int = 28, quick: bool = False) -> list[dict[str, Any]]:
    """Rows per active fraction (``measured``, then :data:`SWEEP`; --quick: measured and 0.1, 0.5): latency
    (s) and energy (J) of one round, full vs CacheEdit, and their ratios."""
    from npukit.sim import load_chip
    from npukit.workloads import load_workload

    from .._chip import run_on_chip

    chip = load_chip(arch_name, warnings=[])  # a Stream file's notes were printed once, when the options were checked

    def cost(w: Any) -> tuple[float, float]:  # (cycles, pJ) of one step
        run = run_on_chip(w, chip)
        return run.cycles, run.energy_pj

    wl = load_workload(SPEC)
    fc, fe = cost(wl)
    ghz = chip.clock_ghz
    rows = []
    for frac in (measured, *((0.1, 0.5) if quick else SWEEP)):
        a = max(1, round(frac * TARGET))
        sc, se = cost(sparse_step(wl, a))
        cc, ce = 2 * fc + (steps - 1) * sc, 2 * fe + (steps - 1) * se
        rows.append(dict(model="flux.1-kontext-dev", res=1024, steps=steps, arch=arch_name,
                         active_frac=round(frac, 4), active_tokens=a, measured=frac == measured,
                         full_latency_s=steps * fc / (ghz * 1e9), cached_latency_s=cc / (ghz * 1e9),
                         full_energy_j=steps * fe * 1e-12, cached_energy_j=ce * 1e-12,
                         latency_speedup=steps * fc / cc, energy_ratio=steps * fe / ce,
                         sparse_step_cycles_frac=sc / fc))
    return rows

"""OmniMoE on the 128x128 NPU model: expert-centric dense work vs token-centric gathers.

Both schedules of one OmniMoE layer (T tokens, hidden H, N experts, top-k, shared MLP of
intermediate size I) become GEMM-shaped :class:`~npukit.sim.workload.Layer` lists for
:func:`npukit.sim.simulate`:

- shared (both): router projection (T x 2n x H), SwiGLU gate+up (T x 2I x H) and down (T x H x I);
- expert-centric: per active expert e with m_e tokens, ``X_e (m_e x H) @ u_e (H x 1)`` and
  ``a_e (m_e x 1) @ v_e (1 x H)``; experts with the same m_e form one layer with batch = their
  count. u_e and v_e are fetched from DRAM once per expert; the token rows are gathered per pair
  (ifmap traffic). Recorded on top: the scheduler's sort traffic (32-bit keys and ids, radix
  passes of 8 bits) and the scatter-add of the per-pair outputs (psum-width DRAM read and an
  accumulator add per element), with their DRAM stall cycles at the arch's bandwidth;
- token-centric (PEER-style): per token, ``x_t (1 x H) @ U_t (H x k)`` and ``a_t (1 x k) @ V_t
  (k x H)`` with U_t, V_t the token's gathered expert rows (filter traffic: 2*T*k*H elements),
  plus the 32-bit index reads.

Expert loads m_e come from uniform routing (a router at initialisation is close to uniform), drawn
with a fixed seed, unless ``counts`` is given.

On a multi-core arch (a preset such as ``quad128``, a ``.toml`` with ``[[core]]`` tables, ``stream:CHIP.yaml``) both
workloads run through :func:`npukit.sim.simulate_multicore` under its schedule search: the experts' batched layers
may be split over the cores on their batch (expert parallelism: each core takes whole experts), on M, N or K, or
fused. The sort and scatter-add traffic is then timed at the DRAM bandwidth all MAC cores get together, and priced
with the first MAC core's psum widths. Layer spans may overlap when steps pipeline, so on such a chip the
``shared`` and ``experts`` rows' cycles need not add up to the ``total``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from npukit.sim import Layer, Ledger, MultiCoreArch, Workload, chip_table, load_chip
from npukit.sim.psum_path import PsumCounts, psum_records

from .._chip import run_on_chip

IDX_BITS = 32
# a row's energy columns, one per single-core component; a multi-core chip's others (interconnect, shared memory, a
# loop-nest core's memories) go to energy_other_pj
COMPONENTS = ("pe_array", "input_registers", "weight_registers", "psum_registers", "ifmap_sram", "filter_sram",
              "psum_buffer", "psum_adder", "ofmap_sram", "dram")


def uniform_counts(tokens: int, k: int, num_experts: int, seed: int = 0) -> list[int]:
    """Tokens per active expert when each token picks k distinct experts uniformly at random."""
    import numpy as np

    rng = np.random.default_rng(seed)
    P = tokens * k
    if k * 4 <= num_experts:  # distinct-per-token draws; repeats within a token are rare enough to resample
        ids = rng.integers(0, num_experts, size=(tokens, k))
        dup = np.array([len(set(r)) < k for r in ids])
        for t in np.nonzero(dup)[0]:
            ids[t] = rng.choice(num_experts, size=k, replace=False)
    else:
        ids = np.stack([rng.choice(num_experts, size=k, replace=False) for _ in range(tokens)])
    counts = np.bincount(ids.reshape(-1), minlength=num_experts)
    out = [int(c) for c in counts if c]
    assert sum(out) == P
    return out


def workloads(tokens: int, hidden: int, num_experts: int, k: int, intermediate: int,
              counts: list[int]) -> dict[str, Workload]:
    """The two schedules as NPU workloads (see the module docstring)."""
    T, H, I = tokens, hidden, intermediate
    n = math.isqrt(num_experts)
    shared = [
        Layer("router_proj", T, 2 * n, H, kind="linear"),
        Layer("mlp_gate_up", T, 2 * I, H, kind="linear"),
        Layer("mlp_down", T, H, I, kind="linear"),
    ]
    ec = list(shared)
    for m, c in sorted(Counter(counts).items()):
        ec.append(Layer(f"experts_up_m{m}", m, 1, H, batch=c, kind="gemm"))
        ec.append(Layer(f"experts_down_m{m}", m, H, 1, batch=c, kind="gemm"))
    tc = list(shared) + [
        Layer("tokens_up", 1, k, H, batch=T, kind="gemm"),
        Layer("tokens_down", 1, H, k, batch=T, kind="gemm"),
    ]
    meta = dict(tokens=T, hidden=H, experts=num_experts, topk=k, intermediate=I, active=len(counts))
    return {"expert_centric": Workload("expert_centric", ec, dict(meta)),
            "token_centric": Workload("token_centric", tc, dict(meta))}


def npu_cost(tokens: int, hidden: int, num_experts: int, k: int, intermediate: int | None = None,
             arch: str = "npu128", counts: list[int] | None = None, seed: int = 0) -> dict[str, Any]:
    """Simulate both schedules; returns ``{"rows": [...], "ledgers": {name: Ledger}, "table": name}``.

    Each row: path, part (``shared``/``experts``/``extra``/``total``), cycles, DRAM bytes and energy
    per component in pJ.
    """
    I = intermediate or 4 * hidden
    counts = counts if counts is not None else uniform_counts(tokens, k, num_experts, seed)
    chip = load_chip(arch, warnings=[])  # a Stream file's notes were printed once, when the options were checked
    table = chip_table(chip)
    a, bw = _reference_core(chip)
    P, H = tokens * k, hidden
    rows: list[dict[str, Any]] = []
    ledgers: dict[str, Ledger] = {}
    for name, wl in workloads(tokens, hidden, num_experts, k, I, counts).items():
        run = run_on_chip(wl, chip, table)
        led, layers = run.ledger, run.layers
        scope = f"{name}/extra"
        if name == "expert_centric":
            passes = max(1, math.ceil(math.log2(max(num_experts, 2)) / 8))
            sort_elems = P * 2 * passes  # keys + ids per pass, read and written
            led.record("dram", "dram_read", IDX_BITS, sort_elems + P, scope)
            led.record("dram", "dram_write", IDX_BITS, sort_elems + len(counts) + 1, scope)
            led.record("dram", "dram_read", a.bits.psum_buffer, P * H, scope)  # scatter-add read-back
            # the scatter-add merges each read-back partial output into a running sum: the psum rules' adder
            scatter = PsumCounts(P, H, 1, a.rows, a.cols, buffer_reads=0, buffer_writes=0, spilled_reads=P * H)
            for comp, act, bits, n in psum_records(scatter, a.bits, None):
                led.record(comp, act, bits, n, scope)
            extra_bytes = (2 * sort_elems + P + len(counts) + 1) * IDX_BITS / 8 + P * H * a.bits.psum_buffer / 8
        else:
            led.record("dram", "dram_read", IDX_BITS, P, scope)  # each token's k expert ids
            extra_bytes = P * IDX_BITS / 8
        led.add_cycles(extra_bytes / bw, "stall", scope)
        ledgers[name] = led
        parts = {"shared": [r for r in layers if not r[0].startswith(("experts_", "tokens_"))],
                 "experts": [r for r in layers if r[0].startswith(("experts_", "tokens_"))]}
        for part, lrs in parts.items():
            e: dict[str, float] = {}
            for r in lrs:
                for c, v in r[3].items():
                    e[c] = e.get(c, 0.0) + v
            rows.append(_row(name, part, sum(r[1] for r in lrs), sum(r[2] for r in lrs), e))
        ex = _scope_energy(led, table, scope)
        rows.append(_row(name, "extra", extra_bytes / bw, extra_bytes, ex))
        rows.append(_row(name, "total", led.total_cycles(), sum(r[2] for r in layers) + extra_bytes,
                         led.energy_by(table, "component")))
    return {"rows": rows, "ledgers": ledgers, "table": table.name, "arch": chip.name, "active": len(counts),
            "reuse": P / num_experts}


def _reference_core(chip: Any) -> tuple[Any, float]:
    """The core whose psum widths price the scatter-add (a multi-core chip's first MAC core) and the DRAM bandwidth
    (bytes/cycle) the sort and scatter traffic gets: one core's port, or on a multi-core chip what all its MAC cores
    get together from the DRAM channels."""
    if not isinstance(chip, MultiCoreArch):
        return chip, chip.dram_bandwidth_bytes_per_cycle
    macs = chip.mac_cores
    ports = sum(chip.cores[i].arch.dram_bandwidth_bytes_per_cycle for i in macs)
    return chip.cores[macs[0]].arch, min(ports, chip.dram.total_bandwidth)


def _scope_energy(led: Ledger, table: Any, scope: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for sc, row in led.energy_matrix(table).items():
        if sc == scope:
            for c, v in row.items():
                out[c] = out.get(c, 0.0) + v
    return out


def _row(path: str, part: str, cycles: float, dram_bytes: float, energy: dict[str, float]) -> dict[str, Any]:
    row: dict[str, Any] = {"path": path, "part": part, "cycles": float(cycles), "dram_bytes": float(dram_bytes)}
    for comp in COMPONENTS:
        row[f"energy_{comp}_pj"] = float(energy.get(comp, 0.0))
    row["energy_other_pj"] = float(sum(v for c, v in energy.items() if c not in COMPONENTS))  # links, shared memory
    row["energy_total_pj"] = float(sum(energy.values()))
    return row

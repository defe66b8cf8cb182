"""A :class:`~npukit.sim.workload.Workload` on a general :class:`~npukit.sim.hardware.Hardware` through the
loop-nest mapper (:mod:`npukit.sim.nest_mapper`): per layer energy per memory level and operand (pJ),
cycles and the chosen loop nest; ``zigzag:HW.yaml[,MAPPING.yaml]`` arch specs.

Layers become ZigZag's loop dimensions: a conv ``(ih, iw, fh, fw, cin, cout, stride)`` (padded extents,
per group) run ``batch`` times (groups x images, ``shared`` images per group's weights) -> B = images,
K = cout, C = cin, OY/OX, FY/FX, G = groups; the input's
extent (pr sizes are clipped to it) is the padded extent less ``f - 1`` (symmetric 'same' padding). A
GEMM (M x K) @ (K x N) run ``batch`` times -> B = M, C = K, K = N, G = batch. Vector ops are skipped
(ZigZag maps only conv/GEMM layers onto the array).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import nest_cache
from .errors import ConfigError
from .hardware import Hardware
from .loopnest import NestLayer
from .nest_mapper import NestMapping, map_layer
from .workload import Layer, Workload
from .zigzag_io import load_zigzag_hardware, load_zigzag_mapping

OBJECTIVES = ("energy", "latency", "edp")
NEST_LEGEND = ("loop nests: per operand (W weights, I inputs, O outputs), its memories from DRAM inwards separated by "
               "'|', each level's loops outermost first ('-': none); 'parfor D1: K32' = 32 of dim K across array "
               "dim D1; dims (ZigZag's): B batch or GEMM rows M, K output channels or GEMM columns N, C input "
               "channels or the reduction K, OY/OX output rows/cols, FY/FX filter rows/cols, G groups")


def nest_layer(layer: Layer) -> NestLayer:
    """An npukit layer as ZigZag loop dimensions (see the module docstring)."""
    if layer.conv is not None:
        ih, iw, fh, fw, cin, cout, stride = layer.conv[:7]
        oy, ox = (ih - fh) // stride + 1, (iw - fw) // stride + 1
        # ``shared`` consecutive instances of the batch (images) share one group's weights
        b = max(layer.M // max(oy * ox, 1), 1) * layer.shared
        dims = {"B": b, "K": cout, "C": cin, "OY": oy, "OX": ox, "FY": fh, "FX": fw, "G": layer.batch // layer.shared}
        return NestLayer(layer.name, dims, (stride, stride), (max(ih - (fh - 1), 1), max(iw - (fw - 1), 1)))
    dims = {"B": layer.M, "K": layer.N, "C": layer.K, "OY": 1, "OX": 1, "FY": 1, "FX": 1, "G": layer.batch}
    return NestLayer(layer.name, dims)


@dataclass
class NestResult:
    """Per-layer mappings of a workload on a Hardware; energies in pJ, cycles in clock cycles."""

    workload: str
    hw: Hardware
    objective: str
    mappings: list[NestMapping] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def energy_pj(self) -> float:
        return sum(m.cost.energy_pj for m in self.mappings)

    @property
    def cycles(self) -> float:
        return sum(m.cost.cycles for m in self.mappings)

    def energy_by_level(self) -> dict[tuple[str, str], float]:
        """(memory name or 'mac', operand) -> pJ over the workload."""
        out: dict[tuple[str, str], float] = {("mac", "-"): 0.0}
        for m in self.mappings:
            out[("mac", "-")] += m.cost.mac_pj
            for op, ens in m.cost.energy.items():
                for mem, e in zip(self.hw.levels(op), ens, strict=True):
                    out[(mem.name, op)] = out.get((mem.name, op), 0.0) + e
        return out

    def rows(self) -> list[dict]:
        rows = []
        for m in self.mappings:
            c = m.cost
            row = {"layer": m.layer.name, **{d: m.layer.dims.get(d, 1) for d in ("B", "K", "C", "OY", "OX", "FY", "FX", "G")},
                   "macs": m.layer.macs, "cycles": round(c.cycles), "temporal_cycles": c.temporal_cycles,
                   "energy_pj": round(c.energy_pj, 3), "mac_pj": round(c.mac_pj, 3)}
            for op, ens in c.energy.items():
                for mem, e in zip(self.hw.levels(op), ens, strict=True):
                    row[f"{op}_{mem.name}_pj"] = round(e, 3)
            rows.append(row)
        return rows

    def render(self, quiet: bool = False) -> str:
        a = self.hw.array
        head = (f"{self.workload} on {self.hw.name}: {'x'.join(str(s) for s in a.dims.values())} MACs "
                f"({', '.join(a.dims)}), {len(self.hw.memories)} memories, objective {self.objective}")
        lines = [head]
        if not quiet:
            for m in self.mappings:
                lines.append(f"{m.layer.name}: {m.cost.energy_pj / 1e6:.3f} uJ, {m.cost.cycles:,.0f} cycles")
                lines.append(m.loop_nest(self.hw))
        lines.append(f"total: {self.energy_pj / 1e6:.3f} uJ, {self.cycles:,.0f} cycles, "
                     f"{len(self.mappings)} layers mapped in {self.wall_s * 1e3:.0f} ms")
        if not quiet:
            lines.append(NEST_LEGEND)
        return "\n".join(lines)

    def mapping_json(self) -> list[dict]:
        """Each layer's loop nest per memory level (innermost loop first per level) and spatial unrolling."""
        out = []
        for m in self.mappings:
            out.append({"layer": m.layer.name, "dims": m.layer.dims, "spatial": m.spatial,
                        "temporal": {op: [{"memory": mem.name, "loops": [[d, s] for d, s in lv]}
                                          for mem, lv in zip(self.hw.levels(op), m.temporal[op], strict=True)]
                                     for op in ("W", "I", "O")},
                        "energy_pj": m.cost.energy_pj, "cycles": m.cost.cycles})
        return out


def parse_zigzag_spec(spec: str) -> tuple[Hardware, dict[str, dict[str, dict[str, int]]] | None]:
    """``zigzag:HW.yaml[,MAPPING.yaml]`` -> (Hardware, spatial mappings by operator name or None)."""
    body = spec.split(":", 1)[1] if spec.startswith("zigzag:") else spec
    parts = [p for p in body.split(",") if p]
    if not parts or len(parts) > 2:
        raise ConfigError(f"--arch {spec}: expected zigzag:HW.yaml[,MAPPING.yaml]")
    for p in parts:
        if not Path(p).is_file():
            raise ConfigError(f"--arch {spec}: no such file {p}")
    notes: list[str] = []  # printed once both files are good: a refusal stays one line
    hw = load_zigzag_hardware(parts[0], notes)
    mapping = load_zigzag_mapping(parts[1], notes) if len(parts) == 2 else None
    for line in notes:
        print(line, file=sys.stderr)
    return hw, mapping


def spatial_for(mappings: dict | None, layer: Layer) -> dict[str, dict[str, int]] | None:
    """ZigZag's choice of mapping entry: the operator type (Conv for convs, Gemm otherwise), else 'default'."""
    if not mappings:
        return None
    op = "Conv" if layer.conv is not None else "Gemm"
    return mappings.get(op) or mappings.get("default")


def simulate_nest(workload: Workload, hw: Hardware, spatial: dict | None = None, objective: str = "energy",
                  cache: bool = True) -> NestResult:
    """Map every conv/GEMM layer of ``workload`` on ``hw`` (``spatial``: a ZigZag mapping file's entries).
    Identical layer shapes are mapped once; with ``cache`` the mappings are read from (and written to)
    npukit's on-disk cache (:mod:`npukit.sim.nest_cache`), equal number for number to a fresh search."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    t0 = time.perf_counter()
    res = NestResult(workload.name, hw, objective)
    todo = [(nest_layer(ly), spatial_for(spatial, ly)) for ly in workload.layers if isinstance(ly, Layer)]
    keys = [repr((nl.key(), sm)) for nl, sm in todo]
    entry = nest_cache.entry_path(hw, keys, objective, __file__) if cache and todo else None
    body = nest_cache.load(entry) if entry is not None else None
    fresh: dict[str, NestMapping] = {}
    for (nl, sm), key in zip(todo, keys, strict=True):
        m = nest_cache.from_body(body, key, nl) if body is not None else None
        if m is None:
            m = map_layer(hw, nl, sm, objective)
            fresh[key] = m
        res.mappings.append(m)
    if entry is not None and fresh:
        nest_cache.store(entry, {k: m for k, m in zip(keys, res.mappings, strict=True)})
    res.wall_s = time.perf_counter() - t0
    return res

"""Colours of npukit's figures, one home: one fixed colour per energy component, per cycle kind and per
series name, so a component (or a policy, a ledger) has the same colour in every figure that draws it.

Sim reports (:mod:`npukit.sim.report_figures`), sweep reports and the experiments' figures all take their
colours from here. Colours are matplotlib colour strings (hex), from the tab20 / tab10 palettes.
"""

from __future__ import annotations

# Every energy component npukit's ledgers charge, each its own colour (tab20: the dark/light pairs keep
# related components in one hue: registers blue, SRAMs green/orange/purple, the psum path red/pink).
COMPONENT_COLORS: dict[str, str] = {
    "pe_array": "#1f77b4",
    "input_registers": "#aec7e8",
    "weight_registers": "#17becf",
    "psum_registers": "#9edae5",
    "ifmap_sram": "#2ca02c",
    "filter_sram": "#98df8a",
    "psum_buffer": "#d62728",
    "psum_adder": "#ff9896",
    "psum_quantizer": "#e377c2",
    "psum_features": "#f7b6d2",
    "psum_predictor": "#8c564b",
    "ofmap_sram": "#9467bd",
    "dram": "#ff7f0e",
    "vector_unit": "#bcbd22",
    "interconnect": "#7f7f7f",
    "leakage": "#c49c94",
}
# For names not above: colours none of the fixed ones use, then cycled.
_SPARE = ["#dbdb8d", "#c5b0d5", "#ffbb78", "#c7c7c7", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
          "#5254a3", "#8ca252", "#bd9e39", "#ad494a", "#a55194"]

# Cycle kinds of a latency bar.
KIND_COLORS: dict[str, str] = {"compute": "#4c72b0", "stall": "#dd8452"}

# Series (ledgers, policies, configurations) in the order they are first drawn: tab10.
SERIES = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf"]

# Named series that recur across figures (the psum policies of the experiments).
SERIES_COLORS: dict[str, str] = {
    "none": "#7f7f7f",
    "float": "#000000",
    "static": "#1f77b4",
    "dynamic": "#2ca02c",
    "psumquant": "#d62728",
}

LOWER, HIGHER = "#55a868", "#c44e52"  # difference bars: below / above the baseline


def component_colors(names: list[str]) -> dict[str, str]:
    """Component name -> colour: the fixed :data:`COMPONENT_COLORS` entry, else a spare colour in order."""
    out: dict[str, str] = {}
    k = 0
    for name in names:
        if name in COMPONENT_COLORS:
            out[name] = COMPONENT_COLORS[name]
        elif name not in out:
            out[name] = _SPARE[k % len(_SPARE)]
            k += 1
    return out


def series_colors(names: list[str]) -> dict[str, str]:
    """Series name -> colour: :data:`SERIES_COLORS` for the names it knows, else the next :data:`SERIES`
    colour not taken. Pass every name a figure's panels draw, so each keeps one colour across panels."""
    out = {n: SERIES_COLORS[n] for n in names if n in SERIES_COLORS}
    free = [c for c in SERIES if c not in out.values()] or SERIES
    k = 0
    for name in names:
        if name not in out:
            out[name] = free[k % len(free)]
            k += 1
    return out


_SERIES_LIGHT = ["#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d",
                 "#9edae5"]


def cycle_colors(n: int) -> list[str]:
    """``n`` colours for series without names (ledgers by position): :data:`SERIES`, then their light
    variants (20 distinct), then cycled."""
    pool = SERIES + _SERIES_LIGHT
    return [pool[i % len(pool)] for i in range(n)]

"""The multi-core timeline figure: every layer role has a legend entry and a colour of its own up to 20 roles
(repeated blocks share their role's colour), and beyond that the legend says the colours repeat."""

from __future__ import annotations

from npukit.sim.multicore_meta import check_multicore_meta
from npukit.sim.multicore_report import timeline_from_meta


def _meta(names: list[str]) -> dict:
    timeline = [[i % 2, 10.0 * i, 10.0 * i + 8, n] for i, n in enumerate(names)]
    return check_multicore_meta(
        {"core_names": ["c0", "c1"], "timeline": timeline, "schedule": "none/split", "core_busy_cycles": [1.0, 1.0],
         "interconnect_bytes": 0, "interconnect_exposed_cycles": 0,
         "arch": {"name": "two", "cores": [{"kind": "mac"}, {"kind": "mac"}]}}, 10.0 * len(names), "w")


def _legend(fig) -> list[str]:  # noqa: ANN001
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def _bar_colors(fig) -> list[tuple]:  # noqa: ANN001
    return [p.get_facecolor() for p in fig.axes[0].patches]


def test_repeated_blocks_share_a_role_colour_and_the_legend_names_the_roles() -> None:
    names = [f"layers.{b}.{r}" for b in range(8) for r in ("q_proj", "k_proj", "softmax", "down_proj")]
    fig = timeline_from_meta(_meta(names), "w", 400.0)
    assert _legend(fig) == ["layers.#.q_proj", "layers.#.k_proj", "layers.#.softmax", "layers.#.down_proj"]
    colors = _bar_colors(fig)
    assert colors[0] == colors[4] == colors[28] and len(set(colors)) == 4


def test_many_roles_get_distinct_colours_then_a_note() -> None:
    names = [f"op_{chr(97 + i)}" for i in range(20)]
    fig = timeline_from_meta(_meta(names), "w", 400.0)
    assert len(_legend(fig)) == 20 and len(set(_bar_colors(fig))) == 20
    fig = timeline_from_meta(_meta(names + ["op_x", "op_y", "op_z"]), "w", 400.0)
    assert _legend(fig)[-1] == "+ 3 more (colours repeat)"


def test_a_pipelined_group_is_drawn_over_its_whole_span_tile_by_tile() -> None:
    # two GEMM stages on two cores: each stage's bars run from its first tile to its last, the second stage's last
    # bar ends at the group's latency, and each core's bars add up to its busy cycles
    import pytest

    from npukit.sim import Layer, Workload, load_arch
    from npukit.sim.interconnect import Interconnect
    from npukit.sim.multicore import homogeneous
    from npukit.sim.multicore_sim import simulate_multicore

    mc = homogeneous(load_arch("npu128"), 2, Interconnect(32.0, 0.0, 0.1, "bus"), shared_kib=1024)
    res = simulate_multicore(Workload("pair", [Layer("A", 64, 128, 64), Layer("B", 64, 64, 128)]), mc,
                             "chain/pipeline")
    tiles = res.rows()[0]["tiles"]
    for core in (0, 1):
        bars = sorted((a, b) for c, a, b, _ in res.timeline if c == core)
        assert len(bars) == tiles  # one bar per tile
        assert sum(b - a for a, b in bars) == pytest.approx(res.core_busy[core])
        assert all(b <= a2 + 1e-9 for (_, b), (a2, _) in zip(bars, bars[1:], strict=False))  # in order, no overlap
    d0, d1 = (res.core_busy[c] / tiles for c in (0, 1))
    first = sorted(a for c, a, _, _ in res.timeline if c == 1)[0]
    assert first == pytest.approx(d0)  # stage 1 starts once stage 0 has made its first tile
    assert max(b for _, _, b, _ in res.timeline) == pytest.approx(res.total_cycles)
    assert res.total_cycles > max(res.core_busy) > 0  # the span is longer than either stage's work

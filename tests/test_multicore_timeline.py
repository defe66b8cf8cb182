"""The multi-core timeline figure: every layer role has a legend entry and a colour of its own up to 20 roles
(repeated blocks share their role's colour), and beyond that the legend says the colours repeat."""

from __future__ import annotations

from npukit.sim.multicore_report import timeline_from_meta


def _meta(names: list[str]) -> dict:
    timeline = [[i % 2, 10.0 * i, 10.0 * i + 8, n] for i, n in enumerate(names)]
    return {"core_names": ["c0", "c1"], "timeline": timeline, "schedule": "none/split",
            "arch": {"name": "two", "cores": [{"kind": "mac"}, {"kind": "mac"}]}}


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

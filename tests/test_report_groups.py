"""Report grouping (layer / block / operator type), top N plus "other", bounded figures, readable relative
differences and one colour per component: :mod:`npukit.sim.report_groups`, :mod:`npukit.sim.palette`."""

from __future__ import annotations

import csv
import struct
from pathlib import Path

import pytest

from npukit.sim import Ledger, load_arch, resnet18, simulate
from npukit.sim.errors import ConfigError
from npukit.sim.palette import COMPONENT_COLORS, component_colors, series_colors
from npukit.sim.report import write_report
from npukit.sim.report_groups import block_names, group_layers, op_names, top_groups
from npukit.sim.report_model import LayerView
from npukit.sim.report_render import fmt_rel

LLAMA = ["model.embed_tokens.embedding", "model.rotary_emb.mul.1", "model.layers.0.self_attn.q_proj",
         "model.layers.0.add.1", "model.layers.12.mlp.down_proj", "model.norm", "lm_head"]
RESNET = ["conv1", "layer1.0.conv1", "layer2.0.downsample.0", "layer4.1.conv2", "fc"]
ONNX = ["/model/embed_tokens/Gather", "/model/layers.0/self_attn/q_proj/MatMul", "/model/layers.1/mlp/Mul_1"]


def test_blocks_from_transformer_resnet_and_onnx_names() -> None:
    assert block_names(LLAMA) == ["model.embed_tokens", "model.rotary_emb", "model.layers.0", "model.layers.0",
                                  "model.layers.12", "model.norm", "lm_head"]
    assert block_names(RESNET) == ["conv1", "layer1.0", "layer2.0", "layer4.1", "fc"]
    assert block_names(ONNX) == ["/model/embed_tokens", "/model/layers.0", "/model/layers.1"]
    assert block_names(LLAMA, depth=2)[2:5] == ["model.layers"] * 3  # an explicit depth: that many parts


def test_operator_types() -> None:
    assert op_names(LLAMA) == ["embedding", "mul", "q_proj", "add", "down_proj", "norm", "lm_head"]
    assert op_names(RESNET) == ["conv1", "conv1", "downsample", "conv2", "fc"]
    assert op_names(ONNX) == ["Gather", "MatMul", "Mul"]


def _view(name: str, pj: float, cycles: float, macs: float = 0.0, eff: float | None = None) -> LayerView:
    facts = {"kind": "linear"} if eff is None else {"kind": "linear", "mapping_efficiency": eff}
    return LayerView(f"w/{name}", {"compute": cycles}, {"dram": pj, "pe_array": pj / 2}, macs, pj, facts)


def test_groups_sum_their_layers_and_other_sums_the_rest() -> None:
    views = [_view(f"model.layers.{i}.mlp.{op}", 10.0 * (i + 1), 5.0 * (i + 1), 100.0, 0.5 + 0.1 * (op == "up"))
             for i in range(6) for op in ("up", "down")]
    blocks = group_layers(views, "block")
    assert [b.scope for b in blocks] == [f"model.layers.{i}" for i in range(6)]
    assert blocks[2].total_energy_pj == pytest.approx(2 * 1.5 * 30.0) and blocks[2].facts["layers"] == 2
    assert blocks[2].facts["mapping_efficiency"] == pytest.approx(0.55)  # MAC-weighted
    ops = group_layers(views, "op")
    assert [o.scope for o in ops] == ["up", "down"]
    shown = top_groups(blocks, 2, "energy", "block")
    assert [v.scope for v in shown[:2]] == ["model.layers.5", "model.layers.4"]  # largest first
    assert shown[2].scope == "other (4 blocks)" and shown[2].facts["other"] == 4
    assert sum(v.total_energy_pj for v in shown) == pytest.approx(sum(v.total_energy_pj for v in views))
    assert sum(v.total_cycles for v in shown) == pytest.approx(sum(v.total_cycles for v in views))
    assert top_groups(blocks, 6, "energy") == blocks  # all fit: model order, no "other"


def test_relative_difference_labels_stay_readable() -> None:
    assert fmt_rel(1.0, 1.0) == "+0.0%"
    assert fmt_rel(0.5, 1.0) == "-50.0%"
    assert fmt_rel(152.3485, 1.0) == "+15,135% (152x)"
    assert fmt_rel(1.0, 0.0) == "n/a (baseline 0)"


def test_one_colour_per_component_and_per_policy() -> None:
    fixed = list(COMPONENT_COLORS)
    assert len(set(component_colors(fixed).values())) == len(fixed)  # pe_array and psum_quantizer differ
    assert component_colors(["psum_quantizer", "pe_array"]) == component_colors(["pe_array", "psum_quantizer"])
    new = component_colors(["pe_array", "mystery", "other_thing"])
    assert len(set(new.values())) == 3
    # a panel that lacks "static" must not give psumquant static's colour
    assert series_colors(["none", "psumquant"])["psumquant"] == series_colors(["none", "static", "psumquant"])["psumquant"]
    assert series_colors(["a", "b"])["a"] != series_colors(["a", "b"])["b"]


def _png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def _big_ledger(blocks: int, scale: float = 1.0) -> Ledger:
    """A transformer-like ledger: ``blocks`` blocks of 4 GEMMs, each its own scope."""
    led = Ledger(meta={"workload": "toy", "arch": load_arch("npu128").to_dict()})
    with led.scope("toy"):
        for b in range(blocks):
            for j, op in enumerate(("self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj")):
                with led.scope(f"model.layers.{b}.{op}"):
                    led.record("pe_array", "mac", (8, 8, 32), int(1000 * (b + 1) * (j + 1) * scale))
                    led.record("dram", "dram_read", (8,), 500 * (j + 1))
                    led.add_cycles(40 * (j + 1))
                    led.add_cycles(10, "stall")
    return led


@pytest.mark.parametrize("group", [pytest.param("layer", marks=pytest.mark.slow),
                                   pytest.param("block", marks=pytest.mark.slow), "op"])
def test_report_of_many_layers_is_bounded(group: str, tmp_path: Path) -> None:
    led = _big_ledger(40)  # 160 layers
    paths = write_report([led], tmp_path / "r", group=group, top=10)
    rows = list(csv.DictReader(paths[f"per_{group}_1.csv"].open()))
    assert len(rows) == {"layer": 160, "block": 40, "op": 4}[group]  # the CSV has every group
    assert sum(float(r["energy_pj"]) for r in rows) == pytest.approx(led.energy("horowitz45"))
    md = paths["md"].read_text()
    if group != "op":
        assert f"other ({ {'layer': 150, 'block': 30}[group] } {group}s)" in md
    for name, path in paths.items():
        if name.endswith(".png"):
            w, h = _png_size(path)
            assert w <= 1400 and h <= 1600, (name, w, h)
    assert paths["html"].stat().st_size < 600_000


@pytest.mark.slow
def test_two_ledgers_with_an_extreme_difference(tmp_path: Path) -> None:
    a, b = _big_ledger(3), _big_ledger(3, scale=200.0)
    paths = write_report([a, b], tmp_path / "r", labels=["small", "big"], group="block")
    w, h = _png_size(paths["compare_components.png"])
    assert w <= 1400 and h <= 1600
    assert "layer_delta_2.png" in paths


@pytest.mark.parametrize("kwargs, needle", [
    ({"group": "module"}, "group must be one of"),
    ({"top": 0}, "top must be an integer from 1 to 60"),
    ({"top": 61}, "top must be an integer from 1 to 60"),
    ({"group": "layer", "block_depth": 2}, "block depth applies to grouping by block"),
    ({"group": "block", "block_depth": 0}, "block depth must be an integer >= 1"),
])
def test_bad_grouping_options_raise_before_writing(kwargs: dict, needle: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=needle):
        write_report([_big_ledger(1)], tmp_path / "r", **kwargs)
    assert not (tmp_path / "r").exists()


def test_cli_group_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from _cli_util import refused

    from npukit.cli import main

    path = tmp_path / "rn.ledger.json"
    simulate(resnet18(), load_arch("npu128")).ledger.save(path)
    refused(["report", str(path), "--top", "0", "--out", str(tmp_path / "bad")], capsys, "top must be")
    assert not (tmp_path / "bad").exists()
    refused(["report", str(path), "--block-depth", "1", "--out", str(tmp_path / "bad")], capsys, "block depth applies")
    assert main(["report", str(path), "--group", "block", "--out", str(tmp_path / "ok")]) == 0
    rows = list(csv.DictReader((tmp_path / "ok" / "per_block_1.csv").open()))
    assert [r["block"] for r in rows] == ["conv1", "layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0",
                                          "layer3.1", "layer4.0", "layer4.1", "fc"]
    assert "wrote" in capsys.readouterr().out


def test_psumquant_figures_keep_one_colour_per_policy_and_component(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import npukit.experiments.psumquant._report as rep

    figs: list = []
    monkeypatch.setattr(rep, "write_figure", lambda path, fig, **kw: figs.append(fig) or Path(path))
    res: dict = {"digits": [], "resnet18": [], "lm": [], "energy": [], "minilm": []}
    for pol in ("none", "static", "psumquant"):
        res["digits"] += [{"policy": pol, "bits": b, "array": "128x128", "top1": 0.9, "model": "d"} for b in (8, 4)]
    for pol in ("none", "psumquant"):  # MiniLM without "static": psumquant must not take static's colour
        res["minilm"] += [{"policy": pol, "bits": b, "array": "128x128", "cosine": 0.99, "model": "m"} for b in (8, 4)]
    rep.plot_accuracy(res, tmp_path / "a.png")
    colours = [{line.get_label(): line.get_color() for line in ax.get_lines()} for ax in figs[0].axes]
    assert colours[0]["psumquant"] == colours[1]["psumquant"] != colours[0]["static"]
    comps = ["pe_array", "psum_quantizer", "psum_buffer", "dram"]
    rows = [{"workload": "w", "mapping": "m", "bits": b, "energy_total_pj": 4.0, "energy_onchip_pj": 3.0,
             **{f"energy_{c}_pj": 1.0 for c in comps}} for b in (32, 8)]
    rep.plot_energy(rows, tmp_path / "e.png")
    ax = figs[1].axes[0]
    drawn = {c.get_label(): c.patches[0].get_facecolor() for c in ax.containers}
    from matplotlib.colors import to_rgba

    assert drawn["pe_array"] == to_rgba(COMPONENT_COLORS["pe_array"]) != drawn["psum_quantizer"]
    assert figs[1].legends and not ax.get_legend()  # the legend sits beside the panels, not over the bars

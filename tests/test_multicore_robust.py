"""The multi-core simulator on inputs nobody had tried: malformed Stream chip files (each refused with one line
naming the problem, nothing read outside the chip's folder, nothing written) and odd workloads and schedules."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.sim import ConfigError
from npukit.sim.stream_io import load_stream_hardware

HW = Path(__file__).parent / "data" / "stream_hw"
CHIP = "tpu_like_quad_core.yaml"


def _chip(tmp_path: Path, edit) -> Path:  # noqa: ANN001 (a str -> str function)
    d = tmp_path / "hw"
    shutil.copytree(HW, d)
    p = d / CHIP
    p.write_text(edit(p.read_text()))
    return p


@pytest.mark.parametrize("edit, needle", [
    # a core file outside the chip's folder is refused before it is read (it used to read and parse it)
    (lambda t: t.replace("0: ./cores/tpu_like.yaml", "0: ../../../../../../etc/passwd"), "outside the chip"),
    (lambda t: t.replace("0: ./cores/tpu_like.yaml", "0: ../hw/cores/tpu_like.yaml"), "outside the chip"),
    (lambda t: t.replace("0: ./cores/tpu_like.yaml", f"0: {HW / 'cores' / 'tpu_like.yaml'}"), "outside the chip"),
    # a link or bus naming a core that is not there (it used to load, the link ignored)
    (lambda t: t.replace("cores: [0, 1]\n", "cores: [0, 99]\n"), "core 99, which is not under cores"),
    (lambda t: t.replace("cores: [0, 1, 2, 3, 4, 5, 6]", "cores: [0, 1, 2, 3, 4, 5, 6, 42]"), "core 42"),
    # a link from a core to itself, or with one core
    (lambda t: t.replace("cores: [0, 1]\n", "cores: [0, 0]\n"), "two distinct cores"),
    (lambda t: t.replace("cores: [0, 1]\n", "cores: [0]\n"), "two distinct cores"),
    (lambda t: t.replace("type: bus", "type: noc"), "use link or bus"),
    # a core id written twice (YAML kept the last silently: three MAC cores, not four), or as 0 and "0"
    (lambda t: t.replace("1: ./cores/tpu_like.yaml", "0: ./cores/tpu_like.yaml"), "written twice"),
    (lambda t: t.replace("1: ./cores/tpu_like.yaml", '"0": ./cores/tpu_like.yaml'), "listed twice"),
    (lambda t: t.replace("0: ./cores/tpu_like.yaml", "-1: ./cores/tpu_like.yaml"), "integer >= 0"),
    (lambda t: t.replace("0: ./cores/tpu_like.yaml", "abc: ./cores/tpu_like.yaml"), "integer >= 0"),
    (lambda t: t + '\ncore_memory_sharing:\n  - "0, 77"\n', "core_memory_sharing names core 77"),
    # already refused before; kept here so that the sweep's whole list of hostile chips stays checked
    (lambda t: t.replace("cores:\n", "cores_x:\n", 1), "needs 'cores'"),
    (lambda t: t.replace("bandwidth: 128", "bandwidth: 0"), "at least 1 bit"),
    (lambda t: t.replace("offchip_core_id: 6", "offchip_core_id: 7"), "offchip_core_id"),
    # the off-chip core must be the memory core: a MAC core there became the DRAM, and only three MAC cores ran
    (lambda t: t.replace("offchip_core_id: 6", "offchip_core_id: 0"), "names a compute core"),
    (lambda t: t.replace("offchip_core_id: 6", "offchip_core_id: 5"), "names a compute core"),
    # the chip file naming itself as a core (it was read again, found to be no core, and its SIMD core dropped)
    (lambda t: t.replace("5: ./cores/simd.yaml", "5: ./tpu_like_quad_core.yaml"), "is the chip file itself"),
])
def test_a_malformed_chip_file_is_refused_with_one_line(tmp_path, capsys, edit, needle) -> None:
    p = _chip(tmp_path, edit)
    with pytest.raises(ConfigError, match=needle):
        load_stream_hardware(p)
    out = tmp_path / "out"
    refused(["sim", "--arch", f"stream:{p}", "--workload", "gemm:M=8,N=8,K=8", "--out", str(out)], capsys, needle)
    assert not out.exists()


def test_the_shipped_chip_still_loads_and_warns_of_its_pooling_core(capsys) -> None:
    m = load_stream_hardware(HW / CHIP)
    assert len(m.mac_cores) == 4
    assert "pooling.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("label, needle", [
    ("foo", "policy 'foo'"),  # ran as blocks/split
    ("search", "policy 'search'"),  # the CLI's word: the API's search is schedule=None
    ("BLOCKS/split", "policy 'BLOCKS'"),
    ("/split", "policy ''"),
    ("none/foo", "mode 'foo'"),  # an unknown mode ran as pipeline
    ("blocks/pipeline/x", "mode 'pipeline/x'"),
])
def test_an_unknown_schedule_label_is_refused_by_the_api(label, needle) -> None:
    from npukit.sim import Layer, Workload
    from npukit.sim.multicore import load_multicore_arch
    from npukit.sim.multicore_sim import simulate_multicore

    wl = Workload("mlp", [Layer("up", 16, 64, 32), Layer("down", 16, 32, 64)])
    m = load_multicore_arch("quad128")
    with pytest.raises(ConfigError, match=needle):
        simulate_multicore(wl, m, label)
    assert simulate_multicore(wl, m, "chain").schedule.label == "chain/split"  # a policy alone: split


@pytest.mark.parametrize("flags, needle", [
    (["--dataflow", "os"], "--dataflow"),
    (["--timing", "scalesim"], "--timing"),
    (["--memory", "scalesim"], "--memory"),
    (["--mapping", "fixed"], "--mapping"),
    (["--table", "aladdin40"], "--table"),
    (["--psum-buffer-bits", "16"], "--psum-buffer-bits"),
])
def test_single_core_overrides_are_refused_on_a_stream_chip(tmp_path, capsys, flags, needle) -> None:
    # they were accepted and changed nothing: the loop-nest cores read their own YAMLs (same cycles and energy)
    out = tmp_path / "out"
    refused(["sim", "--arch", f"stream:{HW / CHIP}", "--workload", "gemm:M=8,N=8,K=8", "--out", str(out), *flags],
            capsys, needle, "loop-nest")
    assert not out.exists()


def test_the_objective_still_applies_to_a_stream_chip(tmp_path, capsys) -> None:
    from npukit.cli import main

    out = tmp_path / "out"
    assert main(["sim", "--arch", f"stream:{HW / CHIP}", "--workload", "gemm:M=8,N=8,K=8", "--out", str(out),
                 "--objective", "energy", "--quiet"]) == 0
    assert "objective energy" in capsys.readouterr().out


@pytest.mark.parametrize("flags, needle", [
    (["--schedule", "foo"], "--schedule"),
    (["--format", "scalesim"], "--format"),
    (["--workload", "gemm:M=0,N=8,K=8"], "gemm"),
])
def test_a_refusal_after_a_chip_with_warnings_loaded_is_one_line(tmp_path, capsys, flags, needle) -> None:
    # the chip's warnings (its pooling core) used to come first: two lines for one refusal
    out = tmp_path / "out"
    refused(["sim", "--arch", f"stream:{HW / CHIP}", "--workload", "gemm:M=8,N=8,K=8", "--out", str(out), *flags],
            capsys, needle)
    assert not out.exists()


@pytest.mark.parametrize("chip", ["tpu_like_quad_core.yaml", "eyeriss_like_dual_core.yaml", "simba.yaml",
                                  "tpu_v7_ironwood.yaml"])
@pytest.mark.parametrize("gemm", ["gemm:M=1,N=1000,K=1", "gemm:M=4096,N=1,K=4096", "gemm:M=1,N=4096,K=4096",
                                  "gemm:M=1,N=1,K=4096"])
@pytest.mark.parametrize("policy", ["none/split", "chain/split"])
def test_a_gemv_shaped_layer_maps_on_every_shipped_chip(chip, gemm, policy) -> None:
    # tpu_like, M=1,N=1000,K=1: only the output channels exceed 1, and K32 x K32 overfills the 32-bit register D2
    # shares: it maps only with an array dimension left idle. simba, M=4096,N=1,K=4096: no loop order of the
    # 36-way row shares fits simba_chiplet's memories (every per-PE buffer takes all loops, the global buffer is
    # then left the whole input): another split maps
    from npukit.sim.multicore_sim import simulate_multicore
    from npukit.workloads import load_workload

    m = load_stream_hardware(HW / chip, warn=False)
    w = load_workload(gemm)
    r = simulate_multicore(w, m, policy)
    assert r.total_cycles >= w.macs / m.peak_macs_per_cycle
    assert math.isfinite(r.energy_pj) and r.energy_pj > 0
    assert "D" in r.rows()[0]["core_mapping"] and ": " not in r.rows()[0]["core_mapping"] + " "


def test_an_idle_array_dimension_only_when_no_unrolling_fits() -> None:
    from npukit.sim._multicore_nest import nest_layer, on_chip
    from npukit.sim.nest_spatial import ranked_spatial
    from npukit.workloads import load_workload

    m = load_stream_hardware(HW / CHIP, warn=False)
    hw = on_chip(next(c.nest for c in m.cores if c.nest is not None))
    only_k = list(ranked_spatial(hw, nest_layer(load_workload("gemm:M=1,N=1000,K=1").layers[0])))
    assert only_k and all(any(not loops for loops in sm.values()) for sm in only_k)
    both = list(ranked_spatial(hw, nest_layer(load_workload("gemm:M=64,N=64,K=64").layers[0])))
    assert both and all(all(loops for loops in sm.values()) for sm in both)


def test_a_split_that_maps_nowhere_is_skipped_not_fatal() -> None:
    from npukit.sim._multicore_nest import map_share, nest_layer, on_chip, with_offchip
    from npukit.sim.multicore_sim import simulate_multicore
    from npukit.workloads import load_workload

    m = load_stream_hardware(HW / "simba.yaml", warn=False)
    hw = with_offchip(on_chip(next(c.nest for c in m.cores if c.nest is not None)), 1.0)
    row_share = nest_layer(load_workload("gemm:M=114,N=1,K=4096").layers[0])  # a 36-way M split's share
    with pytest.raises(ConfigError, match="no loop order fits"):
        map_share(hw, row_share, "latency")
    r = simulate_multicore(load_workload("gemm:M=4096,N=1,K=4096"), m, "none/split")
    assert r.rows()[0]["split"] not in ("M", "-")

"""Reading npukit TOML archs, SCALE-Sim .cfg configs and SCALE-Sim topology CSVs."""

import pytest

from npukit.sim import (
    ConfigError,
    WorkloadError,
    load_arch,
    load_topology_csv,
    resnet18,
    simulate,
)
from npukit.sim.workload import write_topology_csv
from npukit.workloads import load_workload

SCALESIM_CFG = """[general]
run_name = GoogleTPU_v1_ws

[architecture_presets]
ArrayHeight:    256
ArrayWidth:     256
IfmapSramSzkB:    6144
FilterSramSzkB:   6144
OfmapSramSzkB:    2048
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Bandwidth : 10
Dataflow : ws
MemoryBanks:   1

[run_presets]
InterfaceBandwidth: CALC
"""


def _resnet18_conv_csv() -> str:
    lines = ["Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,"]
    for layer in resnet18().layers:
        if layer.conv:
            lines.append(f"{layer.name}, " + ", ".join(str(v) for v in layer.conv) + ",")
        else:  # FC as a 1x1 conv on a 1x1 input
            lines.append(f"{layer.name}, 1, 1, 1, 1, {layer.K}, {layer.N}, 1,")
    return "\n".join(lines) + "\n"


def test_scalesim_cfg(tmp_path):
    p = tmp_path / "google.cfg"
    p.write_text(SCALESIM_CFG)
    a = load_arch(p)
    assert (a.name, a.rows, a.cols, a.dataflow) == ("GoogleTPU_v1_ws", 256, 256, "ws")
    assert (a.sram_kib.ifmap, a.sram_kib.filter, a.sram_kib.ofmap, a.sram_kib.psum) == (6144, 6144, 2048, 2048)
    assert a.dram_bandwidth_bytes_per_cycle == 10  # 10 words/cycle at 8 bits
    assert a.timing == "scalesim"


def test_scalesim_conv_topology_equals_builtin_resnet18(tmp_path):
    p = tmp_path / "resnet18.csv"
    p.write_text(_resnet18_conv_csv())
    w = load_topology_csv(p)
    assert [(x.name, x.M, x.N, x.K) for x in w.layers] == [(x.name, x.M, x.N, x.K) for x in resnet18().layers]
    a = load_arch("npu128").with_(mapping="fixed")  # SCALE-Sim's loop order: its compute cycles
    assert simulate(w, a).compute_cycles == 441_581


def test_gemm_topology_round_trip(tmp_path):
    p = write_topology_csv(load_workload("minilm-l6:seq=64"), tmp_path / "m.csv")
    w = load_topology_csv(p)
    assert w.macs == load_workload("minilm-l6:seq=64").macs
    assert w.layers[0].kind == "gemm"
    # a workload with vector ops writes its GEMMs only (SCALE-Sim has no vector unit)
    q = write_topology_csv(load_workload("llama3-8b-layer:seq=16"), tmp_path / "l.csv")
    assert load_topology_csv(q).macs == load_workload("llama3-8b-layer:seq=16").macs


def test_npukit_toml_arch(tmp_path):
    p = tmp_path / "a.toml"
    p.write_text('name = "mine"\nrows = 16\ncols = 8\ndataflow = "os"\n[bits]\npsum_buffer = 12\n[sram_kib]\npsum = 64\n')
    a = load_arch(p)
    got = (a.name, a.rows, a.cols, a.dataflow, a.bits.psum_buffer, a.bits.input, a.sram_kib.psum)
    assert got == ("mine", 16, 8, "os", 12, 8, 64)


@pytest.mark.parametrize(
    "text,msg",
    [
        ("rows = [", "not valid TOML"),
        ("rows = 0", "rows"),
        ('dataflow = "rs"', "unknown dataflow 'rs'"),
        ("depth = 3", "unknown arch key 'depth'"),
        ("[bits]\npsum_buffer = 8.5", "bits.psum_buffer"),
        ("[sram_kib]\nifmap = -1", "sram_kib.ifmap"),
    ],
)
def test_bad_toml_arch(tmp_path, text, msg):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=msg):
        load_arch(p)


@pytest.mark.parametrize(
    "text,msg",
    [
        ("[general]\nrun_name = x\n", "architecture_presets"),
        ("[architecture_presets]\nArrayHeight: 8\nArrayWidth: 8\n", "Dataflow"),
        ("[architecture_presets]\nArrayHeight: eight\nArrayWidth: 8\nDataflow: ws\n", "rows"),
        ("this is not ini", "not a valid SCALE-Sim .cfg"),
    ],
)
def test_bad_cfg(tmp_path, text, msg):
    p = tmp_path / "bad.cfg"
    p.write_text(text)
    with pytest.raises(ConfigError, match=msg):
        load_arch(p)


@pytest.mark.parametrize(
    "text,msg",
    [
        ("Layer, M, N, K,\nfc, 1, 2,\n", "expected 7 conv fields"),
        ("Layer, M, N, K,\nfc, 1, x, 3,\n", "non-integer"),
        ("Layer, M, N, K,\nfc, 0, 2, 3,\n", "M must be a positive integer"),
        ("Layer, M, N, K,\n", "no layers"),
        ("", "empty"),
        ("L,H,W,FH,FW,C,N,S,\nc, 3, 3, 5, 5, 1, 1, 1,\n", "larger than the input"),
        ("Layer, M, N, K,\na, 1, 2, 3,\na, 1, 2, 3,\n", "appears twice"),
    ],
)
def test_bad_topology(tmp_path, text, msg):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(WorkloadError, match=msg):
        load_topology_csv(p)


def test_bad_workload_specs():
    with pytest.raises(WorkloadError, match="unknown workload 'vgg'"):
        load_workload("vgg")
    with pytest.raises(WorkloadError, match="unknown option .len."):
        load_workload("llama3-8b-layer:len=5")
    with pytest.raises(WorkloadError, match="needs M, N and K"):
        load_workload("gemm:M=5")
    with pytest.raises(WorkloadError, match="M must be a positive integer"):
        load_workload("gemm:M=0,N=1,K=1")
    with pytest.raises(WorkloadError, match="does not exist"):
        load_workload("/nonexistent/topo.csv")
    with pytest.raises(ConfigError, match="does not exist"):
        load_arch("/nonexistent/arch.toml")

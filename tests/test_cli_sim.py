"""``npukit sim``: output, files written, start-up imports and every kind of bad input."""

import csv
import json
import os
import subprocess
import sys

import pytest

from npukit.cli import main
from npukit.sim import Ledger


def test_sim_prints_table_and_writes_ledger_and_csv(tmp_path, capsys):
    # fixed mapping: SCALE-Sim's loop order, whose compute cycles are SCALE-Sim's 441,581
    out = tmp_path / "o"
    argv = ["sim", "--workload", "resnet18", "--psum-buffer-bits", "8", "--mapping", "fixed", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "layer4.1.conv2" in text and "441,581 compute cycles" in text and "on-chip" in text
    stem = "resnet18_npu128_ws_psum8_mapping-fixed"  # named by what ran: the override of npu128's search mapping
    ledger = Ledger.load(out / f"{stem}.ledger.json")
    assert ledger.total_cycles("compute") == 441_581
    assert ledger.meta["arch"]["bits"]["psum_buffer"] == 8
    rows = list(csv.DictReader(open(out / f"{stem}.csv")))
    assert len(rows) == 21 and rows[0]["name"] == "conv1"
    assert sum(int(r["compute_cycles"]) for r in rows) == 441_581
    assert f"wrote {out / f'{stem}.csv'}" in text
    assert {r["mapping"] for r in rows} == {"NMK M/1"}
    assert all(float(r["energy_onchip_pj"]) < float(r["energy_total_pj"]) for r in rows)
    assert sum(float(r["dram_ifmap_read_bytes"]) for r in rows[:1]) == 229 * 229 * 3  # conv1's unique padded input


def test_sim_search_mapping_is_no_worse_than_fixed_on_its_objective(tmp_path, capsys):
    # the search keeps the fixed mapping as its first candidate, so per layer it can only improve EDP
    res = {}
    for mode in ("fixed", "search"):
        out = tmp_path / mode
        assert main(["sim", "--workload", "resnet18", "--mapping", mode, "--objective", "edp", "--out", str(out), "--quiet"]) == 0
        name = "resnet18_npu128_ws_psum32" + ("_mapping-fixed" if mode == "fixed" else "")
        res[mode] = list(csv.DictReader(open(out / f"{name}.csv")))
    for f, s in zip(res["fixed"], res["search"], strict=True):
        edp = [float(r["energy_total_pj"]) * int(r["total_cycles"]) for r in (f, s)]
        assert edp[1] <= edp[0] * (1 + 1e-9), f["name"]
    assert any(r["mapping"] != "NMK M/1" for r in res["search"])


def test_sim_dataflow_override_and_topology_csv(tmp_path, capsys):
    topo = tmp_path / "g.csv"
    topo.write_text("Layer, M, N, K,\ng, 512, 512, 512,\n")
    assert main(["sim", "--workload", str(topo), "--dataflow", "os", "--out", str(tmp_path), "--quiet"]) == 0
    assert "12,255 compute cycles" in capsys.readouterr().out


def test_sim_does_not_import_torch_or_triton(tmp_path):
    # a built-in workload needs none of the kernels' stack, the model libraries, the ONNX reader or numpy
    heavy = ("torch", "triton", "matplotlib", "numba", "onnx", "transformers", "diffusers", "numpy")
    code = (
        "import sys; from npukit.cli import main;"
        f"rc = main(['sim', '--workload', 'resnet18', '--out', {str(tmp_path)!r}, '--quiet']);"
        f"assert rc == 0; bad = [m for m in {heavy!r} if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def _bad(tmp_path, capsys, argv, needle):
    out = tmp_path / "out"
    rc = main(["sim", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert needle in lines[0], lines[0]
    assert not out.exists() or not any(out.iterdir())


def test_bad_arch_toml(tmp_path, capsys):
    p = tmp_path / "a.toml"
    p.write_text("rows = = 3")
    _bad(tmp_path, capsys, ["--arch", str(p)], "not valid TOML")


def test_unknown_dataflow_in_file(tmp_path, capsys):
    p = tmp_path / "a.toml"
    p.write_text('dataflow = "rs"')
    _bad(tmp_path, capsys, ["--arch", str(p)], "unknown dataflow 'rs': use one of ws, os, is")


def test_negative_size(tmp_path, capsys):
    p = tmp_path / "a.toml"
    p.write_text("rows = -8")
    _bad(tmp_path, capsys, ["--arch", str(p)], "'rows' must be a positive integer")


def test_bad_cfg(tmp_path, capsys):
    p = tmp_path / "a.cfg"
    p.write_text("[general]\n")
    _bad(tmp_path, capsys, ["--arch", str(p)], "architecture_presets")


def test_bad_csv(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text("Layer, M, N, K,\nfc, 1, two, 3,\n")
    _bad(tmp_path, capsys, ["--workload", str(p)], "non-integer")


def test_unknown_workload(tmp_path, capsys):
    _bad(tmp_path, capsys, ["--workload", "vgg16"], "unknown workload 'vgg16'")


def test_zero_gemm(tmp_path, capsys):
    _bad(tmp_path, capsys, ["--workload", "gemm:M=0,N=4,K=4"], "M must be a positive integer")


def test_missing_files(tmp_path, capsys):
    _bad(tmp_path, capsys, ["--arch", str(tmp_path / "nope.toml")], "does not exist")
    _bad(tmp_path, capsys, ["--workload", str(tmp_path / "nope.csv")], "does not exist")
    _bad(tmp_path, capsys, ["--table", str(tmp_path / "nope.toml")], "does not exist")


def test_buffer_too_small(tmp_path, capsys):
    p = tmp_path / "a.toml"
    p.write_text("[sram_kib]\nfilter = 4\n")
    _bad(tmp_path, capsys, ["--arch", str(p)], "filter SRAM (4 KiB) is too small for one fold")


def test_unknown_option_and_choice(tmp_path, capsys):
    for argv in (["sim", "--dataflow", "rs"], ["sim", "--colour", "x"], ["simulate"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error:" in err[0]


def test_unwritable_out(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["sim", "--workload", "gemm:M=8,N=8,K=8", "--out", str(blocker / "sub")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "output" in err[0]
    if os.geteuid() != 0:  # root can write anywhere; the chmod case only means something for users
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        assert main(["sim", "--workload", "gemm:M=8,N=8,K=8", "--out", str(ro)]) == 2


def test_cli_entry_point_exit_code(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "npukit")
    r = subprocess.run([exe, "sim", "--workload", "nonsense", "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "unknown workload" in r.stderr
    r = subprocess.run([exe, "sim", "--workload", "gemm:M=64,N=64,K=64", "--out", str(tmp_path), "--quiet"],
                       capture_output=True, text=True, check=True)
    assert json.loads((tmp_path / "gemm64x64x64_npu128_ws_psum32.ledger.json").read_text())["format"]


def test_write_figure_is_atomic(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from npukit.sim import write_figure

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    out = write_figure(tmp_path / "a.png", fig, dpi=50)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    class Broken:
        def savefig(self, path, **kw):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_figure(tmp_path / "b.png", Broken())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]  # no target, no temporary left behind
    plt.close(fig)

"""Accelergy interchange: an ERT.yaml prices a run (``--table ERT.yaml``), and ``npukit sim --format accelergy``
writes action counts in Accelergy's action-count format that price back to the ledger's own energy."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from _cli_util import refused

from npukit.cli import main
from npukit.sim import EnergyTableError, Ledger, load_arch, load_table, resnet18, simulate
from npukit.sim.accelergy import action_counts, component_of, load_ert, price_action_counts

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "accelergy_ERT.yaml"


def test_example_ert_prices_a_run_as_the_table_it_restates(tmp_path: Path) -> None:
    out = tmp_path / "o"
    assert main(["sim", "--workload", "resnet18", "--table", str(EXAMPLE), "--out", str(out), "--quiet"]) == 0
    (path,) = out.glob("*.ledger.json")
    led = Ledger.load(path)
    assert led.meta["energy_table"] == str(EXAMPLE)
    ert, h45 = load_table(str(EXAMPLE)), load_table("horowitz45")
    by_ert, by_h45 = led.energy_by(ert, "component"), led.energy_by(h45, "component")
    assert set(ert.actions) >= set(by_ert)  # every component of this run is priced by the ERT itself
    for comp, e in by_h45.items():
        assert by_ert[comp] == pytest.approx(e, rel=1e-5), comp  # the ERT's 6 significant digits


def test_ert_entries_price_their_components_and_the_rest_falls_back(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    tables = data["ERT"]["tables"]
    pe = next(t for t in tables if component_of(t["name"]) == "pe_array")
    pe["actions"][0]["energy"] *= 2  # a MAC twice as expensive
    data["ERT"]["tables"] = [t for t in tables if component_of(t["name"]) != "ofmap_sram"]  # not listed: fallback
    ert_path = tmp_path / "ERT.yaml"
    ert_path.write_text(yaml.safe_dump(data))
    ert = load_ert(ert_path)
    led = simulate(resnet18(), load_arch("npu128")).ledger
    got, ref = led.energy_by(ert, "component"), led.energy_by("horowitz45", "component")
    assert got["pe_array"] == pytest.approx(2 * ref["pe_array"], rel=1e-5)
    assert got["ofmap_sram"] == ref["ofmap_sram"]  # horowitz45's own rule
    assert got["dram"] == pytest.approx(ref["dram"], rel=1e-5)
    assert "ERT pe_array" in ert.sources() and "ERT ofmap_sram" not in ert.sources()


def test_action_counts_format_and_prices_back_to_the_ledger(tmp_path: Path) -> None:
    # a 1 KiB psum buffer spills psums to DRAM: DRAM reads at 8 and 32 bits, priced apart
    arch = load_arch("npu128").with_(**{"sram_kib.psum": 1})
    led = simulate(resnet18(), arch).ledger
    doc = action_counts(led)
    top = doc["action_counts"]
    assert top["version"] == "0.4" and "local" in top  # what Accelergy's action-count parser requires
    for item in top["local"]:
        assert item["name"].startswith("system.npu.") and item["action_counts"]
        for row in item["action_counts"]:
            assert set(row) <= {"name", "arguments", "counts"} and row["counts"] > 0
    dram = next(i for i in top["local"] if i["name"] == "system.npu.dram")["action_counts"]
    reads = {r["arguments"]["bits"]: r["counts"] for r in dram if r["name"] == "read"}
    assert set(reads) == {8, 32}
    assert sum(reads.values()) == led.count("dram", "dram_read")
    ert = load_ert(EXAMPLE)
    priced = price_action_counts(yaml.safe_load(yaml.safe_dump(doc)), ert)  # through YAML text, as a user would
    own = led.energy_by(ert, "component")
    for comp, e in priced.items():
        assert e == pytest.approx(own[comp], rel=1e-9), comp


def test_cli_format_accelergy_writes_action_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["sim", "--workload", "gemm:M=64,N=64,K=64", "--format", "accelergy", "--out", str(out), "--quiet"]) == 0
    assert f"wrote {out / 'action_counts.yaml'}" in capsys.readouterr().out
    doc = yaml.safe_load((out / "action_counts.yaml").read_text())
    pe = next(i for i in doc["action_counts"]["local"] if i["name"] == "system.npu.pe_array")
    assert pe["action_counts"] == [{"name": "mac_random", "arguments": {"bits": [8, 8, 32]}, "counts": 64 ** 3}]


@pytest.mark.parametrize("text,needle", [
    ("ERT: {version: 0.4}", "no 'ERT: tables:' list"),
    ("ERT:\n  tables:\n  - name: system.npu.dram\n    actions:\n    - name: read\n      energy: -1\n", "must be a number >= 0"),
    ("ERT: [unclosed", "not valid YAML"),
])
def test_bad_ert_exit_2_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(EnergyTableError, match=needle.replace("(", r"\(")):
        load_ert(bad)
    refused(["sim", "--workload", "gemm:M=8,N=8,K=8", "--table", str(bad), "--out", str(tmp_path / "o")], capsys, needle)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_accelergy_itself_prices_the_counts_like_npukit(tmp_path: Path) -> None:
    """Accelergy (its own virtualenv, never an npukit dependency; set NPUKIT_ACCELERGY to its ``accelergy``
    executable) reads the example ERT and the written action counts and gives npukit's energies."""
    import os
    import subprocess

    exe = os.environ.get("NPUKIT_ACCELERGY")
    if not exe or not Path(exe).is_file():
        pytest.skip("set NPUKIT_ACCELERGY to an accelergy executable (pip install Accelergy 0.4 into its own venv)")
    out = tmp_path / "o"
    assert main(["sim", "--workload", "resnet18", "--table", str(EXAMPLE), "--format", "accelergy", "--out", str(out),
                 "--quiet"]) == 0
    subprocess.run([exe, str(EXAMPLE), str(out / "action_counts.yaml"), "-o", str(tmp_path / "acc"),
                    "-f", "energy_estimation"], check=True, capture_output=True)
    est = yaml.safe_load((tmp_path / "acc" / "energy_estimation.yaml").read_text())["energy_estimation"]
    led = Ledger.load(next(out.glob("*.ledger.json")))
    own = led.energy_by(load_ert(EXAMPLE), "component")
    for item in est["components"]:
        assert item["energy"] == pytest.approx(own[component_of(item["name"])], rel=1e-9)
    assert est["Total"] == pytest.approx(sum(own.values()), rel=1e-9)

"""Sweep fixes from the multi-core hunt (notes hunt_J #3, #4, #5, #7, #8): a rate too small for finite cycles is
refused before any work, and a point the simulator refuses names its grid values and leaves no row of the run
behind (no worker traceback on Dask); an energy table file is keyed by its bytes, not its path; a grid
``objective`` that a chip's objective overrides is refused; the multi-core header's mapping objective; the message
of a rerun whose points changed."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from _cli_util import refused

import npukit.sweeps
from npukit.cli import main
from npukit.sim import ConfigError, load_arch
from npukit.sim.bounded import MIN_RATE
from npukit.sweeps import expand_points, load_sweep_spec, parse_sweep_spec, read_rows, run_points, run_sweep

HOROWITZ = Path(npukit.sweeps.__file__).parent.parent / "sim" / "tables" / "horowitz45.toml"


def spec_of(arch: str, grid: dict, workloads: tuple[str, ...] = ("gemm:M=64,N=64,K=64",), derived: dict | None = None):
    data = {"sweep": {"name": "t", "arch": arch, "workloads": list(workloads)}, "grid": grid}
    if derived:
        data["derived"] = derived
    return parse_sweep_spec(data)


def count(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT count(*) FROM points").fetchone()[0]
    finally:
        con.close()


# ------------------------------------------------------------------------------ #3: rates, failing points
@pytest.mark.parametrize("key", ["interconnect.bandwidth_bytes_per_cycle", "dram.bandwidth_bytes_per_cycle",
                                 "shared_memory.bandwidth_bytes_per_cycle", "clock_ghz", "dram_bandwidth_bytes_per_cycle"])
def test_a_rate_too_small_for_finite_cycles_is_refused_before_any_work(key) -> None:
    with pytest.raises(ConfigError, match=rf"grid key '{key}' = 1e-300.*too small.*at least 1\.084e-19.*overflow"):
        expand_points(spec_of("quad128", {key: [32.0, 1e-300]}))
    assert len(expand_points(spec_of("quad128", {key: [32.0, MIN_RATE]}))) == 2  # the bound itself is accepted


def test_a_derived_or_base_rate_too_small_names_its_point(tmp_path) -> None:
    spec = spec_of("npu32", {"rows": [8, 16]}, derived={"dram_bandwidth_bytes_per_cycle": "rows * 1e-301"})
    with pytest.raises(ConfigError, match=r"grid point \(rows=8, dram_bandwidth_bytes_per_cycle=8e-301\): .*"
                                          r"'dram_bandwidth_bytes_per_cycle' = 8e-301 is too small"):
        expand_points(spec)
    chip = tmp_path / "chip.toml"
    chip.write_text('name = "c"\n[[core]]\narch = "npu32"\ncount = 2\n[interconnect]\nbandwidth_bytes_per_cycle = 1e-300\n')
    with pytest.raises(ConfigError, match=r"'interconnect.bandwidth_bytes_per_cycle' = 1e-300 is too small"):
        expand_points(spec_of(str(chip), {"chip.mac_cores": [1, 2]}))
    # the base chip file is itself refused as it loads (npukit sim refuses it too), even where a grid value would
    # replace its rate
    with pytest.raises(ConfigError, match=r"'interconnect.bandwidth_bytes_per_cycle' = 1e-300 is too small"):
        expand_points(spec_of(str(chip), {"interconnect.bandwidth_bytes_per_cycle": [32.0]}))


def refuse_rows(bad_rows: int):
    """A stand-in for simulate() that refuses (ConfigError) the arch of ``bad_rows`` rows, as an overflow would."""
    real = npukit.sweeps.simulate

    def fake(wl, arch, *args, **kwargs):
        if arch.rows == bad_rows:
            raise ConfigError("the edp of X is inf (overflow: an input number is too large); check that component's inputs")
        return real(wl, arch, *args, **kwargs)

    return fake


# 30 one-layer points: the first chunk (20 layers) is stored before the point of rows=30 fails
GRID30 = {"rows": list(range(1, 31))}


def test_a_point_the_simulator_refuses_is_named_and_its_run_stores_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(npukit.sweeps, "simulate", refuse_rows(30))
    db = tmp_path / "s.sqlite"
    run_points(expand_points(spec_of("npu32", {"rows": [1, 2]})), db, workers=1)  # rows stored before this run
    with pytest.raises(ConfigError, match=r"^grid point \(rows=30\), workload 'gemm:M=64,N=64,K=64': the edp of X is inf "
                                          r".*; no point of this run was stored$"):
        run_points(expand_points(spec_of("npu32", GRID30)), db, workers=1)
    assert sorted(r["rows"] for r in read_rows(db)) == [1, 2]  # the database as it was before the run


def test_cli_sweep_with_a_refused_point_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(npukit.sweeps, "simulate", refuse_rows(30))
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\narch = "npu32"\nworkloads = ["gemm:M=64,N=64,K=64"]\n[grid]\nrows = '
                    f'{GRID30["rows"]}\n')
    out = tmp_path / "o"
    refused(["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"], capsys,
            "grid point (rows=30)", "overflow", "no point of this run was stored")
    assert not out.exists()  # the new database, emptied again, and its folder are removed


def test_dask_task_refusal_comes_back_as_a_value() -> None:
    from npukit import __version__
    from npukit.sweeps._dask import _Refused, _run_checked

    got = _run_checked(load_arch, __version__, "no-such-arch.toml")
    assert isinstance(got, _Refused) and isinstance(got.error, ConfigError)
    assert _run_checked(len, __version__, "abc") == 3


@pytest.mark.slow
def test_dask_point_refused_names_it_without_a_worker_traceback(tmp_path, capfd) -> None:
    pytest.importorskip("distributed")
    from npukit.sweeps import make_executor

    points = expand_points(spec_of("npu32", GRID30))
    db = tmp_path / "d.sqlite"
    with make_executor(dask_local=1) as ex:
        ex.client.run(setattr, npukit.sweeps, "simulate", refuse_rows(30))
        capfd.readouterr()
        with pytest.raises(ConfigError, match=r"grid point \(rows=30\).*no point of this run was stored"):
            run_points(points, db, executor=ex)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Compute Failed" not in err, err
    assert count(db) == 0


# ------------------------------------------------------------------------------ #4: energy table files
def table_chip(folder: Path, multicore: bool) -> Path:
    """A spec whose arch (a chip of two cores, or one core) names the energy table file mytable.toml beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(HOROWITZ, folder / "mytable.toml")
    (folder / "core.toml").write_text('name = "mycore"\nbase = "npu32"\nenergy_table = "mytable.toml"\n')
    (folder / "chip.toml").write_text('name = "mychip"\nobjective = "edp"\n[[core]]\narch = "core.toml"\ncount = 2\n')
    spec = folder / "spec.toml"
    spec.write_text(f'[sweep]\narch = "{"chip.toml" if multicore else "core.toml"}"\n'
                    'workloads = ["gemm:M=64,N=64,K=64"]\n[grid]\nrows = [16]\n')
    return spec


@pytest.mark.parametrize("multicore", [True, False])
def test_an_edited_energy_table_file_gives_new_keys_and_rows(tmp_path, multicore) -> None:
    spec = table_chip(tmp_path, multicore)
    db = tmp_path / "s.sqlite"
    before = run_sweep(spec, db, workers=1)
    table = tmp_path / "mytable.toml"
    table.write_text(table.read_text().replace("pj_per_access = 1950.0", "pj_per_access = 19500.0"))  # DRAM 10x
    after = run_sweep(spec, db, workers=1)
    assert after.keys != before.keys and after.computed == 1
    old, new = read_rows(db, before.keys + after.keys)
    assert new["energy_dram_pj"] == pytest.approx(10 * old["energy_dram_pj"])


def test_the_key_of_a_table_file_does_not_depend_on_the_working_directory(tmp_path, monkeypatch) -> None:
    table_chip(tmp_path / "a" / "b", True)
    keys = []
    for cwd, path in ((tmp_path, "a/b/spec.toml"), (tmp_path / "a", "b/spec.toml"), (tmp_path / "a" / "b", "spec.toml")):
        monkeypatch.chdir(cwd)
        keys.append([p.key for p in expand_points(load_sweep_spec(path))])
    assert keys[0] == keys[1] == keys[2]


def test_workers_get_the_table_read_when_the_key_was_made(tmp_path) -> None:
    spec = table_chip(tmp_path, False)
    points = expand_points(load_sweep_spec(spec))
    (tmp_path / "mytable.toml").unlink()  # a worker never reads the path (a remote Dask worker may not have it)
    assert run_points(points, tmp_path / "s.sqlite", workers=1).computed == 1


# ------------------------------------------------------------------------------ #5: the cores' objective on a chip
def test_the_cores_objective_on_a_chip_that_overrides_it_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"grid point \(objective='latency'\): grid key 'objective' sets the MAC cores' "
                                          r"own objective.*this chip's is 'edp'; vary \"chip.objective\" instead"):
        expand_points(spec_of("quad128", {"objective": ["latency", "energy"]}))
    with pytest.raises(ConfigError, match=r"grid point \(chip.objective='energy', objective='latency'\)"):
        expand_points(spec_of("quad128", {"chip.objective": ["latency", "energy"], "objective": ["latency"]}))
    # on a latency chip the cores' objective maps the shares; on one core it is the arch's own
    assert len(expand_points(spec_of("quad128", {"chip.objective": ["latency"], "objective": ["latency", "edp"]}))) == 2
    assert len(expand_points(spec_of("npu32", {"objective": ["latency", "edp"]}))) == 2


# ------------------------------------------------------------------------------ #7: the header's mapping objective
@pytest.mark.slow
def test_a_cores_header_prints_the_objective_its_shares_are_mapped_under(tmp_path) -> None:
    from npukit.sim.result_text import arch_header, mapping_objective

    core = load_arch("npu32").with_(objective="latency")
    assert "mapping search (objective latency)" in arch_header(core, "horowitz45")[0]
    assert "mapping search (objective energy)" in arch_header(core, "horowitz45", dram=False, chip_objective="energy")[0]
    assert "mapping search (objective latency)" in arch_header(core, "horowitz45", dram=False, chip_objective="latency")[0]
    assert [mapping_objective("edp", c) for c in (None, "latency", "energy", "edp")] == \
        ["edp", "latency", "energy", "edp"]
    # end to end: a latency chip run under --objective energy names energy
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "npukit", "sim", "--arch", "tpu_v4", "--workload", "gemm:M=64,N=64,K=64",
                          "--objective", "energy", "--out", str(tmp_path / "o7")], capture_output=True, text=True)
    assert out.returncode == 0 and "mapping search (objective energy)" in out.stdout


# ------------------------------------------------------------------------------ #8: a rerun whose points changed
def test_a_rerun_after_a_named_file_changed_says_its_points_changed(tmp_path, capsys) -> None:
    spec = table_chip(tmp_path, False)
    out = tmp_path / "o"
    argv = ["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    core = tmp_path / "core.toml"
    core.write_text(core.read_text() + "clock_ghz = 2.0\n")
    capsys.readouterr()
    first = (out / "sweep.csv").read_bytes()
    refused(argv, capsys, "refusing to overwrite", "its points changed", "a file the spec names", "--overwrite")
    assert (out / "sweep.csv").read_bytes() == first
    assert main([*argv, "--overwrite"]) == 0

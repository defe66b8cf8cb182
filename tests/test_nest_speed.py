"""What makes the loop-nest mapper and ``npukit sim --arch zigzag:...`` fast must not change a number:

* the pruned search (shared allocation decisions, prefix and symmetry pruning) finds the same best cost
  as allocating and costing every distinct loop order (``map_layer(..., exhaustive=True)``);
* a mapping read from the on-disk cache (npukit.sim.nest_cache) equals a fresh search number for number,
  a corrupted entry is searched again, an unwritable cache folder is skipped;
* an ONNX file lowered before is read from the on-disk cache (npukit.workloads._onnx_cache) without
  importing onnx; a changed file or a corrupted entry is lowered again.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npukit.sim import Workload, conv_layer
from npukit.sim import nest_sim as nest_sim_mod
from npukit.sim.loopnest import NestLayer
from npukit.sim.nest_mapper import map_layer
from npukit.sim.nest_sim import parse_zigzag_spec, simulate_nest
from npukit.workloads import _onnx_cache, onnx_workload

onnx_module = importlib.import_module("npukit.workloads.onnx_workload")
ZZ = Path(__file__).resolve().parent.parent / "examples" / "zigzag"
MAPS = {"eyeriss_like": "default", "meta_prototype": "meta_prototype_like"}


def _hw(arch: str):
    return parse_zigzag_spec(f"zigzag:{ZZ}/hardware/{arch}.yaml,{ZZ}/mapping/{MAPS.get(arch, arch)}.yaml")


# A 3x3 conv, a strided 1x1 conv, a depthwise conv, a GEMM: loop spaces of 4-7 prime factors
LAYERS = [
    NestLayer("c3", {"B": 1, "K": 64, "C": 64, "OY": 28, "OX": 28, "FY": 3, "FX": 3, "G": 1}, (1, 1), (28, 28)),
    NestLayer("pw", {"B": 1, "K": 96, "C": 24, "OY": 14, "OX": 14, "FY": 1, "FX": 1, "G": 1}, (2, 2), (27, 27)),
    NestLayer("dw", {"B": 1, "K": 1, "C": 1, "OY": 14, "OX": 14, "FY": 3, "FX": 3, "G": 144}, (1, 1), (14, 14)),
    NestLayer("fc", {"B": 1, "K": 1000, "C": 512, "OY": 1, "OX": 1, "FY": 1, "FX": 1, "G": 1}),
]


def _score(cost, objective: str) -> float:
    return {"energy": cost.energy_pj, "latency": cost.cycles, "edp": cost.energy_pj * cost.cycles}[objective]


_SLOW = pytest.mark.slow


@pytest.mark.parametrize("arch", ["tpu_like", pytest.param("eyeriss_like", marks=_SLOW),
                                  pytest.param("tesla_npu_like", marks=_SLOW), pytest.param("gemm_l1_l3", marks=_SLOW),
                                  pytest.param("ascend_like", marks=_SLOW), pytest.param("edge_tpu_like", marks=_SLOW),
                                  pytest.param("meta_prototype", marks=_SLOW)])
@pytest.mark.slow
def test_pruned_search_equals_exhaustive(arch: str) -> None:
    """For every objective the pruned search (bounds, shared allocations, prefix and symmetry pruning) finds
    the exhaustive search's best score, on a 3x3 conv, a strided 1x1 conv, a depthwise conv and an FC layer
    (tesla_npu_like's FC layer needs a loop order with the larger of two C factors inside: an order pruning
    that kept only the smaller inside missed it)."""
    hw, sp = _hw(arch)
    for layer in LAYERS:
        entry = sp.get("Conv" if layer.dims["FY"] > 1 or layer.dims["OY"] > 1 else "Gemm") or sp.get("default")
        for objective in ("energy", "latency", "edp"):
            fast = map_layer(hw, layer, entry, objective)
            ref = map_layer(hw, layer, entry, objective, exhaustive=True)
            assert _score(fast.cost, objective) == _score(ref.cost, objective), (layer.name, objective)


@pytest.mark.parametrize("objective", ["energy", "latency", "edp"])
def test_lower_bound_never_exceeds_the_score(objective: str) -> None:
    """loopnest.lower_bound from any one or two costed operands is <= the exact score (energy: score_of, equal
    to the NestCost's; latency and EDP with ZigZag's latency of the whole mapping), on every order of a layer;
    and for energy and EDP it cuts: some orders' bound exceeds the best score (a latency bound is the
    temporal cycles, the same for every order of one spatial unrolling)."""
    from npukit.sim import nest_mapper as nm
    from npukit.sim.loopnest import cost_of, effective_spatial, evaluate, lower_bound, operand_parts, score_of, spatial_context

    hw, sp = _hw("eyeriss_like")
    layer = LAYERS[0]
    sm = nm.clip_spatial(hw, layer, sp["default"])
    esm = effective_spatial(layer, sm)
    ctx = spatial_context(hw, layer, sm)
    scores, bounds = [], []
    for order in nm._distinct_orders(nm.temporal_lpfs(layer, sm)):
        tm = nm.allocate(hw, layer, esm, order)
        if tm is None:
            continue
        total, parts = operand_parts(hw, layer, tm, ctx)
        assert score_of(ctx, total, parts) == cost_of(ctx, total, parts).energy_pj
        score = _score(evaluate(hw, layer, sm, tm, ctx), objective)
        for keep in ((0,), (1,), (2,), (0, 1), (0, 2), (1, 2)):
            lb = lower_bound(ctx, total, [p if k in keep else None for k, p in enumerate(parts)], objective)
            assert lb <= score
            bounds.append(lb)
        scores.append(score)
    if objective != "latency":
        assert max(bounds) > min(scores)


def _workload() -> Workload:
    return Workload("small", [conv_layer("a", 30, 30, 3, 3, 32, 64, 1), conv_layer("b", 16, 16, 1, 1, 64, 128, 2),
                              conv_layer("a2", 30, 30, 3, 3, 32, 64, 1)])


def _numbers(res) -> str:
    return json.dumps([res.mapping_json(), [[m.cost.accesses, m.cost.energy, m.cost.stall_cycles] for m in res.mappings],
                       sorted(map(list, res.energy_by_level().items()))], sort_keys=True, default=str)


def test_mapping_cache_equals_a_fresh_search(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))
    hw, sp = _hw("edge_tpu_like")
    fresh = simulate_nest(_workload(), hw, sp, cache=False)
    assert not (tmp_path / "cache").exists()
    first = simulate_nest(_workload(), hw, sp)
    (entry,) = (tmp_path / "cache" / "entries").glob("nest-*.json")

    def no_search(*a, **k):
        raise AssertionError("searched although cached")

    monkeypatch.setattr(nest_sim_mod, "map_layer", no_search)
    hit = simulate_nest(_workload(), hw, sp)
    assert _numbers(fresh) == _numbers(first) == _numbers(hit)
    assert [m.layer.name for m in hit.mappings] == ["a", "b", "a2"]
    # another objective is another entry: searched
    with pytest.raises(AssertionError, match="searched"):
        simulate_nest(_workload(), hw, sp, objective="latency")
    # an entry edited by hand (valid JSON, wrong checksum) is searched again and rewritten
    monkeypatch.undo()
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))
    d = json.loads(entry.read_text())
    key = next(iter(d["body"]))
    d["body"][key]["energy"]["W"][0] *= 0.5
    entry.write_text(json.dumps(d))
    assert _numbers(simulate_nest(_workload(), hw, sp)) == _numbers(fresh)
    entry.write_text("{not json")
    assert _numbers(simulate_nest(_workload(), hw, sp)) == _numbers(fresh)
    assert json.loads(entry.read_text())["body"][key]["energy"] == json.loads(json.dumps(fresh.mappings[0].cost.energy))


def test_unwritable_cache_folder_is_skipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(blocker / "cache"))  # under a file: mkdir fails
    hw, sp = _hw("tpu_like")
    assert _numbers(simulate_nest(_workload(), hw, sp)) == _numbers(simulate_nest(_workload(), hw, sp, cache=False))


def _conv_model(path: Path, cout: int) -> Path:
    w = numpy_helper.from_array(np.zeros((cout, 3, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 32, 32])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _lowerings(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = onnx_module._lower

    def spy(p, *a):
        calls.append(p)
        return real(p, *a)

    monkeypatch.setattr(onnx_module, "_lower", spy)
    return calls


def test_onnx_cache_hit_miss_and_corruption(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))
    calls = _lowerings(monkeypatch)
    p = _conv_model(tmp_path / "m.onnx", 16)
    first = onnx_workload(p)
    again = onnx_workload(p)
    assert len(calls) == 1 and first == again and first.gemms[0].N == 16
    # equal to a fresh lowering (meta as JSON values)
    fresh = onnx_module._lower(p, {}, {})
    assert first.layers == fresh.layers
    assert first.meta == json.loads(json.dumps(fresh.meta))
    # another override is another entry
    onnx_workload(p, [1, 3, 32, 32])
    assert len(calls) == 3
    # the file changes: lowered again
    _conv_model(p, 8)
    assert onnx_workload(p).gemms[0].N == 8 and len(calls) == 4
    # a corrupted (edited) entry is lowered again and rewritten
    entry = _onnx_cache.entry_path(p, ({}, {}), onnx_module.__file__)
    d = json.loads(entry.read_text())
    d["body"]["layers"][0]["N"] = 99
    entry.write_text(json.dumps(d))
    assert onnx_workload(p).gemms[0].N == 8 and len(calls) == 5
    entry.write_bytes(b"\x00garbage")
    assert onnx_workload(p).gemms[0].N == 8 and len(calls) == 6
    assert onnx_workload(p).gemms[0].N == 8 and len(calls) == 6
    # a cached read names the workload and path as the caller does
    q = tmp_path / "copy.onnx"
    q.write_bytes(p.read_bytes())
    wq = onnx_workload(q, name="mine")
    assert len(calls) == 6 and wq.name == "mine" and wq.meta["path"] == str(q)


def test_second_run_never_imports_onnx(tmp_path: Path) -> None:
    p = _conv_model(tmp_path / "m.onnx", 16)
    code = ("import sys; from npukit.workloads import onnx_workload; w = onnx_workload(sys.argv[1]); "
            "print(w.gemms[0].N, 'onnx' in sys.modules)")
    env = {"NPUKIT_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    runs = [subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, env=env, check=True)
            for _ in range(2)]
    assert [r.stdout.split() for r in runs] == [["16", "True"], ["16", "False"]]


def _orders(hw, sp: dict, layer) -> tuple[dict, dict, list]:
    """``layer``'s effective unrolling on ``hw`` under its mapping file's entry ``sp``, the unrolling per memory
    level of each operand, and every distinct order of its temporal loop factors."""
    from npukit.sim import nest_mapper as nm
    from npukit.sim.loopnest import effective_spatial, spatial_per_level

    entry = sp.get("Conv" if layer.dims["FY"] > 1 or layer.dims["OY"] > 1 else "Gemm") or sp.get("default")
    sm = nm.clip_spatial(hw, layer, entry)
    esm = effective_spatial(layer, sm)
    su = {o: spatial_per_level(hw, o, esm) for o in "WIO"}
    return esm, su, list(nm._distinct_orders(nm.temporal_lpfs(layer, sm)))


@pytest.mark.parametrize("arch", ["eyeriss_like", "ascend_like", "tpu_like"])
def test_batch_allocation_equals_the_scalar_one(arch: str) -> None:
    """Every order's temporal mapping and reach from the numpy batch equal the scalar allocation's, with
    fractional unrollings too (eyeriss_like's 14 x 12 array on 64 channels: 12.8 and 10.67 per PE)."""
    from npukit.sim import nest_mapper as nm
    from npukit.sim.nest_batch import allocate_all

    hw, sp = _hw(arch)
    fractional = False
    for layer in LAYERS:
        esm, su, orders = _orders(hw, sp, layer)
        batch = allocate_all(hw, layer, esm, orders, su)
        assert batch is not None and len(batch) == len(orders)
        memo: dict = {}
        for order, (tm, reach) in zip(orders, batch, strict=True):
            r = [0]
            assert nm.allocate(hw, layer, esm, order, r, su, memo) == tm
            assert r[0] == reach
        fractional = fractional or any(not float(f).is_integer() for lv in esm.values() for f in lv.values())
    assert fractional or arch != "eyeriss_like"


@pytest.mark.parametrize("arch", ["eyeriss_like", "tpu_like", "gemm_l1_l3"])
def test_cost_groups_equal_the_stationary_keys(arch: str) -> None:
    """nest_batch.stationary_groups (numpy) keeps exactly the first order of each distinct tuple, over W, I, O,
    of loopnest._stationary_key (what the energy reads) and nest_transfers._links_key (what ZigZag's latency
    reads: the top ir and r runs of each level too), both in Python, and gives equal operand ids to equal
    operand keys; its coarse ids likewise to equal loop multisets per level."""
    from npukit.sim.loopnest import _stationary_key, stationary
    from npukit.sim.nest_batch import allocate_batch, stationary_groups, temporal_mapping
    from npukit.sim.nest_transfers import _links_key

    hw, sp = _hw(arch)
    merged = False
    for layer in LAYERS:
        esm, su, orders = _orders(hw, sp, layer)
        batch = allocate_batch(hw, layer, esm, orders, su)
        firsts: dict = {}
        for k in range(len(orders)):
            tm = temporal_mapping(batch, k)
            if tm is not None:
                firsts.setdefault(tuple((_stationary_key(o, tm[o]), _links_key(o, stationary(o, tm[o])))
                                        for o in "WIO"), k)
        groups = stationary_groups(batch)
        assert [k for k, _ in groups] == sorted(firsts.values())
        keys = {k: key for key, k in firsts.items()}
        for j in range(3):
            by_id: dict = {}
            for k, ids in groups:
                assert by_id.setdefault(ids[j], keys[k][j]) == keys[k][j]
            assert len(by_id) == len({keys[k][j] for k, _ in groups})
        # coarse ids: equal exactly when the loop multisets per level (and, for an input, the bottom ir run:
        # the output's cost does not read it) are, what the transfers and the energy parts are keyed by
        coarse = stationary_groups(batch, coarse=True)
        assert [(k, ids) for k, ids, _ in coarse] == groups
        for j, o in enumerate("WIO"):
            by_cid: dict = {}
            for k, _, cids in coarse:
                lv, st = _stationary_key(o, temporal_mapping(batch, k)[o])
                assert by_cid.setdefault(cids[j], (lv, st if o != "O" else 1)) == (lv, st if o != "O" else 1)
            assert len(by_cid) == len(set(by_cid.values()))
        merged = merged or len(groups) < len(orders)
    assert merged


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["energy", "latency", "edp"])
def test_bound_keeps_only_a_better_mapping(objective: str) -> None:
    """``map_layer(..., bound=b)`` returns the unbounded search's mapping when it scores below ``b`` and None when
    it does not (ties included: a caller that holds a mapping of score b wants only a strictly better one), on a
    fresh search (the bound cuts orders), from the cache, and exhaustively; ``map_share`` (which passes its
    one-loop-per-dimension mapping's score to the mixed unrolling's search) returns what the unbounded rule does."""
    import dataclasses
    import math

    from npukit.sim._multicore_nest import map_share, mixed_spatial
    from npukit.sim.nest_mapper import mapping_score

    hw, sp = _hw("eyeriss_like")
    for layer in (LAYERS[1], LAYERS[3]):
        ref = map_layer(dataclasses.replace(hw), layer, None, objective)
        s = mapping_score(ref.cost, objective)
        above = math.nextafter(s, math.inf)
        fresh = map_layer(dataclasses.replace(hw), layer, None, objective, bound=above)
        assert fresh is not None and (fresh.spatial, fresh.temporal, fresh.cost) == (ref.spatial, ref.temporal, ref.cost)
        assert map_layer(dataclasses.replace(hw), layer, None, objective, bound=s) is None
        cached = dataclasses.replace(hw)
        map_layer(cached, layer, None, objective)
        assert map_layer(cached, layer, None, objective, bound=s) is None
        assert map_layer(cached, layer, None, objective, bound=above).cost == ref.cost
        # the mixed unrolling's search as map_share runs it, bounded and not
        mix = mixed_spatial(hw, layer)
        alt = map_layer(dataclasses.replace(hw), layer, mix, objective)
        a = mapping_score(alt.cost, objective)
        assert map_layer(dataclasses.replace(hw), layer, mix, objective, bound=a) is None
        assert map_layer(dataclasses.replace(hw), layer, mix, objective, bound=math.nextafter(a, math.inf)).cost == alt.cost
        want = alt if a < s else ref
        got = map_share(dataclasses.replace(hw), layer, objective)
        assert (got.spatial, got.cost) == (want.spatial, want.cost)
    fc, gemm = LAYERS[3], sp.get("Gemm") or sp.get("default")
    ex = map_layer(hw, fc, gemm, objective, exhaustive=True)
    e = mapping_score(ex.cost, objective)
    assert map_layer(hw, fc, gemm, objective, exhaustive=True, bound=e) is None
    assert map_layer(hw, fc, gemm, objective, exhaustive=True, bound=math.nextafter(e, math.inf)).cost == ex.cost

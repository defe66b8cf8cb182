"""Independent branches at once on disjoint cores (the ``branches`` schedule policy): which runs the recorded dataflow
splits into branches, how the cores are shared, and what a ``parallel`` step costs."""

from __future__ import annotations

import pytest

from npukit.sim import ConfigError, Layer, VectorOp, Workload, load_arch
from npukit.sim._multicore_branches import shares
from npukit.sim.dataflow import Dataflow
from npukit.sim.interconnect import Dram
from npukit.sim.multicore import homogeneous
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.schedule import branch_runs, candidates, make_schedule


def _names(wl: Workload) -> list[list[list[str]]]:
    flow = Dataflow.of(wl)
    assert flow is not None
    return [[[wl.layers[i].name for i in b] for b in run] for run in branch_runs(wl, flow)]


def _attention_in() -> Workload:
    """norm -> q, k, v (each reads the norm) -> scores (q, k) -> context (scores, v)."""
    ops = [VectorOp("norm", "rmsnorm", 64 * 256, reduce=256), Layer("q", 64, 256, 256), Layer("k", 64, 64, 256),
           Layer("v", 64, 64, 256), Layer("scores", 64, 64, 64, 4), Layer("context", 64, 64, 64, 4)]
    flow = {"q": ["norm"], "k": ["norm"], "v": ["norm"], "scores": ["k", "q"], "context": ["scores", "v"]}
    return Workload("attn", ops, {"dataflow": flow})


def test_q_k_and_v_are_branches_until_the_scores_read_two_of_them():
    assert _names(_attention_in()) == [[["q"], ["k"], ["v"]]]


def _experts(n: int = 4, t: int = 64, h: int = 128, f: int = 256) -> Workload:
    """A router, then n experts on gathered tokens, their outputs scatter-added, then the residual and a consumer."""
    ops: list[Layer | VectorOp] = [Layer("router", t * 4, n, h), VectorOp("softmax", "softmax", t * 4 * n, reduce=n)]
    flow: dict[str, list[str]] = {"softmax": ["router"]}
    for e in range(n):
        ops += [Layer(f"e{e}.up", t, f, h), VectorOp(f"e{e}.silu", "silu", t * f), Layer(f"e{e}.down", t, h, f),
                VectorOp(f"e{e}.add", "add", t * h, inputs=2)]
        flow |= {f"e{e}.up": ["~softmax", "~<input 0>"], f"e{e}.silu": [f"e{e}.up"], f"e{e}.down": [f"e{e}.silu"],
                 f"e{e}.add": [f"e{e}.down"] + ([f"e{e - 1}.add"] if e else [])}
    ops += [VectorOp("residual", "add", t * 4 * h, inputs=2), Layer("next", t * 4, h, h)]
    flow |= {"residual": ["<input 0>", f"e{n - 1}.add"], "next": ["residual"]}
    return Workload("moe", ops, {"dataflow": flow})


def test_experts_on_gathered_tokens_are_branches_and_their_sum_closes_the_run():
    (run,) = _names(_experts())
    assert run == [["e0.up", "e0.silu", "e0.down", "e0.add"], ["e1.up", "e1.silu", "e1.down", "e1.add"],
                   ["e2.up", "e2.silu", "e2.down", "e2.add"], ["e3.up", "e3.silu", "e3.down", "e3.add", "residual"]]
    # the router before them is a chain the first expert forks from; "next" reads the whole sum: after the run


def test_an_operator_reading_two_branches_closes_the_run_and_a_chain_alone_is_no_run():
    wl = Workload("w", [Layer("a", 8, 8, 8), Layer("b", 8, 8, 8), Layer("c", 8, 8, 8)],
                  {"dataflow": {"b": ["a"], "c": ["b"]}})
    assert _names(wl) == []  # one chain
    wl = Workload("w", [Layer("a", 8, 8, 8), Layer("b", 8, 8, 8), Layer("c", 8, 8, 8), Layer("d", 8, 8, 8)],
                  {"dataflow": {"c": ["a", "b"], "d": ["c"]}})
    assert _names(wl) == [[["a"], ["b"]]]


def test_a_gemm_on_a_chains_early_output_forks_it():
    # a -> b -> c, and d reads only a: b..c and d are branches after a
    wl = Workload("w", [Layer("a", 8, 8, 8), Layer("b", 8, 8, 8), Layer("c", 8, 8, 8), Layer("d", 8, 8, 8)],
                  {"dataflow": {"b": ["a"], "c": ["b"], "d": ["a"]}})
    assert _names(wl) == [[["b", "c"], ["d"]]]


def test_cores_are_shared_by_weight():
    assert shares([10, 1, 1], [0, 1, 2, 3]) == [([0, 1], [0]), ([2], [1]), ([3], [2])]
    assert shares([5, 4, 3, 3, 1], [0, 1]) == [([0], [0, 3]), ([1], [1, 2, 4])]  # largest first, least loaded core


def test_the_branches_policy_needs_a_dataflow_and_two_cores():
    with pytest.raises(ConfigError, match="needs a workload that records its dataflow"):
        make_schedule(Workload("w", [Layer("a", 8, 8, 8)]), "branches", "split")
    arch = load_arch("npu128")
    assert "branches" in {s.policy for s in candidates(_experts(), homogeneous(arch, 4))}
    assert "branches" not in {s.policy for s in candidates(_experts(), homogeneous(arch, 1))}
    assert "branches" not in {s.policy for s in candidates(Workload("w", _experts().layers), homogeneous(arch, 4))}


def _branch_step(res):
    return [r for r in res.layer_rows if str(r.get("step", "")).startswith("branch")]


def test_a_parallel_step_takes_its_slowest_share_and_the_ledger_adds_up_to_the_latency():
    arch = load_arch("npu128")
    march = homogeneous(arch, 4)
    res = simulate_multicore(_experts(), march, "branches/split")
    rows = _branch_step(res)
    assert {r["core_ids"] for r in rows if r["name"].endswith(".up")} == {"0", "1", "2", "3"}  # an expert per core
    # each expert alone on one core: its up projection's output stays in that core's buffers for its down
    # projection, so it moves exactly that output (64 x 256 bytes at 8 bits) less DRAM than the same GEMM alone
    one = simulate_multicore(Workload("e", [Layer("e0.up", 64, 256, 128)]), homogeneous(arch, 1), "none/split")
    up = next(r for r in res.layer_rows if r["name"] == "e0.up")
    assert one.layer_rows[0]["dram_bytes"] - up["dram_bytes"] == 64 * 256
    assert up["energy_total_pj"] < one.layer_rows[0]["energy_total_pj"]
    assert res.ledger.total_cycles() == pytest.approx(res.total_cycles, rel=1e-9)
    serial = simulate_multicore(_experts(), march, "none/split")
    assert res.total_cycles < serial.total_cycles  # four small GEMMs side by side, not each split four ways
    bars = [b for b in res.timeline if b[3].endswith(".up")]
    assert len({b[1] for b in bars}) == 1 and len({b[0] for b in bars}) == 4  # all start together, on four cores


def test_a_parallel_step_waits_for_the_dram_channels_all_its_shares_use():
    from npukit.sim._multicore_branches import run_parallel
    from npukit.sim.energy import load_table
    from npukit.sim.multicore_sim import _Run

    arch = load_arch("npu128")
    slow = homogeneous(arch, 4, dram=Dram(1, 1.0))  # one byte per cycle for the whole chip
    wl = _experts()
    branches = [[op for op in wl.layers if op.name.startswith(f"e{e}.")] for e in range(4)]
    r = _Run(wl, slow, load_table(arch.energy_table), {})
    run_parallel(r, branches, slow.mac_cores)
    dram = sum(row["dram_bytes"] for row in r.rows)
    assert r.t == pytest.approx(dram / 1.0, rel=1e-9)  # more than any share alone: they share the channels
    assert max(b[2] for b in r.timeline) < r.t  # each share alone would have finished sooner
    assert sum(row["cycles"] for row in r.rows) == pytest.approx(r.t, rel=1e-9)  # rows add up to the step


def test_the_search_keeps_a_parallel_step_only_where_it_ranks_better():
    arch = load_arch("npu128")
    fast = simulate_multicore(_experts(), homogeneous(arch, 4), "branches/split")
    assert _branch_step(fast)  # four small experts side by side beat each split four ways
    # a large GEMM beside a tiny one: side by side the large one gets one of the two cores, split it gets both
    ops = [VectorOp("norm", "rmsnorm", 512 * 512, reduce=512), Layer("big", 512, 512, 512), Layer("tiny", 8, 8, 512),
           Layer("join", 512, 8, 512)]
    wl = Workload("w", ops, {"dataflow": {"big": ["norm"], "tiny": ["norm"], "join": ["big", "tiny"]}})
    two = homogeneous(arch, 2)
    assert _names(wl) == [[["big"], ["tiny"]]]
    lopsided = simulate_multicore(wl, two, "branches/split")
    assert not _branch_step(lopsided)
    assert lopsided.total_cycles == simulate_multicore(wl, two, "chain/split").total_cycles


def test_a_remainder_of_branches_runs_split_over_every_core_after_even_rounds():
    arch = load_arch("npu128")
    res = simulate_multicore(_experts(n=5), homogeneous(arch, 4), "branches/split")
    ups = {r["name"]: r["cores"] for r in res.layer_rows if r["name"].endswith(".up")}
    # four experts one per core, the fifth (a remainder) split over all four afterwards: not two on one core
    assert sorted(ups.values()) == [1, 1, 1, 1, 4]
    piled = simulate_multicore(_experts(n=5), homogeneous(arch, 4), "chain/split")
    assert res.total_cycles < piled.total_cycles
    assert res.ledger.total_cycles() == pytest.approx(res.total_cycles, rel=1e-9)


@pytest.mark.parametrize("seed", range(40))
def test_branch_runs_are_contiguous_and_their_branches_independent(seed: int) -> None:
    import random

    rng = random.Random(seed)
    ops: list[Layer | VectorOp] = []
    flow: dict[str, list[str]] = {}
    for i in range(rng.randint(4, 30)):
        op = Layer(f"g{i}", 8, 8, 8) if rng.random() < 0.6 else VectorOp(f"v{i}", "silu", 64)
        if i and rng.random() < 0.85:
            flow[op.name] = sorted({ops[j].name for j in rng.sample(range(i), min(i, rng.randint(1, 2)))})
        ops.append(op)
    wl = Workload("random", ops, {"dataflow": flow})
    df = Dataflow.of(wl)
    assert df is not None
    seen: set[int] = set()
    for run in branch_runs(wl, df):
        idx = sorted(i for b in run for i in b)
        assert idx == list(range(idx[0], idx[-1] + 1)) and not seen & set(idx)  # contiguous, disjoint
        seen |= set(idx)
        assert sum(any(isinstance(ops[i], Layer) for i in b) for b in run) >= 2
        owner = {i: k for k, b in enumerate(run) for i in b}
        for k, b in enumerate(run):
            for i in b:  # nothing an operator waits for lies in another branch of its run
                assert all(owner.get(j, k) == k for j in df.ancestors(i, idx[0]))


@pytest.mark.parametrize("schedule", ["branches/split", "branches/pipeline", "chain/pipeline"])
def test_no_core_is_drawn_doing_two_things_at_once(schedule: str) -> None:
    # the experts' SiLU and adds all run on hetero4's one simd core: a parallel step or pipeline draws them one
    # after another inside the step (they were drawn at once, each at its share's time)
    from npukit.sim import load_multicore_arch

    res = simulate_multicore(_experts(), load_multicore_arch("hetero4"), schedule)
    by: dict[int, list[tuple[float, float]]] = {}
    for core, start, end, _ in res.timeline:
        assert 0 <= start <= end <= res.total_cycles * (1 + 1e-9)
        by.setdefault(core, []).append((start, end))
    simd = load_multicore_arch("hetero4").simd_cores[0]
    assert len(by[simd]) >= 8
    for bars in by.values():
        bars.sort()
        assert all(b[0] >= a[1] - 1e-6 * max(1.0, a[1]) for a, b in zip(bars, bars[1:], strict=False))

"""Schedules of a workload on a multi-core NPU, and the search that picks one under an objective.

A schedule is a list of :class:`Step` s, each one operator or one fused group of consecutive operators:

* ``split``: every GEMM of the step runs on the MAC cores at once, split on ``M`` (the batch first), ``N`` or
  ``K``, or on ``M`` and ``N`` at once as a grid of cores (:func:`grid_dims`; the split chosen per GEMM by the
  objective; with the arch's ``layer_cores = "search"`` a GEMM in a step of its own may also take only the first
  1, 2, 4, ... cores, and ``n - 1``: :func:`layer_splits`);
  vector ops run on the SIMD core if there is one, else split over the MAC cores.
* ``pipeline``: the step's GEMMs are cut into contiguous stages, each stage on its own share of the MAC cores;
  the step's rows flow through in ``tiles`` tiles, so its latency is one pass of every stage on one tile plus
  ``tiles - 1`` times the slowest stage's tile (fill and drain), and each stage's output crosses the
  interconnect to the next stage's cores.
* ``fused``: inside the group, a producer's output stays on chip for its consumer (the shared memory, or the
  core's own buffers when producer and consumer rows stay on the same core: an M-split both sides) and never
  goes to DRAM. Producer -> consumer edges are found from shapes (:func:`feeds`): consecutive GEMMs where the
  consumer's K (or a conv's input channels) is the producer's N with the same rows, e.g. attention scores ->
  context and the MLP's up -> down projection, with vector ops between them (softmax, SiLU, mul) inside the
  group; where the workload records its dataflow (a traced model: :mod:`npukit.sim.dataflow`) an edge also needs
  the producer's output to reach the consumer through vector ops only, so look-alike neighbours (the experts of a
  mixture-of-experts layer) are not chained. With ``chain``, GEMMs that read the same input (:func:`siblings`:
  the q, k and v projections; with a dataflow, the same recorded sources) join a group too, and the later ones
  read that input from the cores' buffers. A group is kept only if its largest
  intermediate fits the on-chip memory.
* ``parallel``: independent branches of the workload (:func:`branch_runs`, from its recorded dataflow: the experts
  of a mixture-of-experts layer, the q, k and v projections, a diffusion block's image and text streams) run at
  once, each on its own share of the MAC cores (:mod:`npukit.sim._multicore_branches`).

Fusion policies: ``none`` (layer by layer), ``blocks`` (only attention and MLP groups), ``chain`` (every edge),
``branches`` (``chain``, with every run of independent branches a ``parallel`` step instead; needs a dataflow).
:func:`candidates` enumerates (policy, mode) pairs; :func:`search` simulates each and keeps the best by the
arch's objective (``edp``, ``energy`` or ``latency``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .dataflow import Dataflow
from .errors import ConfigError
from .multicore import MultiCoreArch
from .workload import Layer, VectorOp, Workload

POLICIES = ("none", "blocks", "chain", "branches")
MODES = ("split", "pipeline")
SPLIT_DIMS = ("M", "N", "K")


def grid_dims(cores: int) -> tuple[str, ...]:
    """The 2-D splits of ``cores`` cores: ``M{a}N{b}`` (``a`` row parts x ``b`` column parts, ``a * b = cores``) for
    the most square factorisation and its transpose, none for a prime count."""
    a = max((d for d in range(2, int(cores ** 0.5) + 1) if cores % d == 0), default=0)
    if not a:
        return ()
    return tuple(dict.fromkeys((f"M{a}N{cores // a}", f"M{cores // a}N{a}")))


def split_dims(cores: int) -> tuple[str, ...]:
    """Every split of a GEMM over ``cores`` cores the search compares: on ``M``, ``N`` or ``K``, and the 2-D grids
    of :func:`grid_dims` (rows and columns at once, as a mesh of cores splits a layer's output)."""
    return SPLIT_DIMS + grid_dims(cores)


def fewer_counts(cores: int) -> tuple[int, ...]:
    """The core counts below ``cores`` the search also tries (``layer_cores = "search"``), largest first: each power
    of two, and ``cores - 1``, so one more core never takes away the count the chip had (2026-12-07; before, only
    for a prime with a grid below it: a prime count has no 2-D split, so 7 cores without 6 took a 256^3 GEMM 20%
    slower than 6, and six 24 x 24 cores without 5 took a GEMM-add pair 2% slower than five)."""
    out = {1 << e for e in range(max(0, (cores - 1).bit_length()))}  # every power of two below cores
    if cores > 1:
        out.add(cores - 1)
    return tuple(sorted(out, reverse=True))


def layer_splits(cores: int, fewer: bool = True) -> tuple[tuple[str, int], ...]:
    """(split, cores used) of every way the search may run one GEMM alone on ``cores`` MAC cores: each split of
    :func:`split_dims` over all of them first (ties keep every core), then, with ``fewer``, over the first ``k``
    cores for each count ``k`` of :func:`fewer_counts`, largest first (``-``: one core, unsplit). Fewer cores win
    where a split costs more than it saves (halo rows and partial sums crossing the links, weights or inputs each
    core fetches again, a per-core fill and weight load the share does not amortise)."""
    out = [(d, cores) for d in split_dims(cores)] if cores > 1 else [("-", 1)]
    for k in fewer_counts(cores) if fewer else ():
        out += [(d, k) for d in split_dims(k)] if k > 1 else [("-", 1)]
    return tuple(out)


def split_label(dim: str, used: int, cores: int) -> str:
    """A split's name in results: ``dim`` when it uses all ``cores``, else ``dim@used`` (``-@1``: one core)."""
    return dim if used == cores else f"{dim}@{used}"


def grid(dim: str) -> tuple[int, int] | None:
    """(row parts, column parts) of a 2-D split label ``M{a}N{b}``, None for a 1-D split."""
    m = re.fullmatch(r"M(\d+)N(\d+)", dim)
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Step:
    """Operators ``first..last`` (indices into the workload's list) run as one step; a ``parallel`` step runs its
    ``branches`` (each a tuple of operator indices, in program order) at once on disjoint shares of the MAC cores."""

    first: int
    last: int
    mode: str = "split"
    fused: bool = False
    branches: tuple[tuple[int, ...], ...] = ()

    @property
    def indices(self) -> range:
        return range(self.first, self.last + 1)


@dataclass
class Schedule:
    """A whole-workload schedule: its ``steps``, the fusion ``policy`` and ``mode`` that made it."""

    policy: str
    mode: str
    steps: list[Step] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.policy}/{self.mode}"


def feeds(prod: Layer, cons: Layer) -> bool:
    """Whether ``cons`` reads ``prod``'s output as its input (a shape rule: same batch and rows, and the
    consumer's reduction dim is the producer's output width; for a conv consumer, its input channels)."""
    if cons.conv is not None:
        return prod.conv is not None and cons.conv[4] == prod.N and prod.batch == cons.batch
    return prod.batch == cons.batch and prod.M == cons.M and cons.K == prod.N or flattens(prod, cons)


def flattens(prod: Layer, cons: Layer) -> bool:
    """Whether GEMM ``cons`` reads conv ``prod``'s whole output map flattened (a CNN head: one row per image, the
    reduction dim is the map's pixels x channels)."""
    return prod.conv is not None and cons.conv is None and cons.M * cons.batch == prod.batch and \
        cons.K == prod.M * prod.N


def glu_feeds(prod: Layer, cons: Layer, between: Sequence[Layer | VectorOp]) -> bool:
    """Whether ``cons`` reads the gated half of ``prod``'s output: a merged gate-and-up projection (``N = 2 F``) whose
    halves a two-input ``mul`` among the vector ops ``between`` them combines, ``act(gate) * up`` with ``F`` elements
    per row, into the consumer's input (its ``K = F``): a SwiGLU or GeGLU MLP with one ``gate_up_proj``, as in
    transformers' fused mixture-of-experts modules (Mixtral, Qwen-MoE, DeepSeek) and Phi-3. ``between`` must hold
    vector ops only (a shape rule, as :func:`feeds`)."""
    if prod.conv is not None or cons.conv is not None or (prod.batch, prod.M) != (cons.batch, cons.M) or \
            prod.N != 2 * cons.K or any(isinstance(v, Layer) for v in between):
        return False
    rows = prod.batch * prod.M * cons.K
    return any(v.op == "mul" and v.inputs == 2 and v.batch * v.elements == rows for v in between)  # type: ignore[union-attr]


def reshaped(prod: Layer, cons: Layer) -> bool:
    """Whether ``cons`` may read ``prod``'s whole output as its left operand reshaped (as many elements: the heads of
    an attention context merged into the output projection's rows, ``(B*heads, L, d) -> (B*L, heads*d)``, or a
    query projection split into heads). Shapes alone cannot tell this from a coincidence, so it counts only where
    the workload's recorded dataflow has the path (:func:`linked`); neither may be a conv."""
    return prod.conv is None and cons.conv is None and prod.batch * prod.M * prod.N == cons.batch * cons.M * cons.K


def feeds_filter(prod: Layer, cons: Layer) -> bool:
    """Whether attention GEMM ``cons`` reads ``prod``'s output as its right operand, heads folded into the batch:
    the keys (scores' K x N is the k projection's output transposed) or the values (context's K x N)."""
    if cons.kind != "attention" or prod.conv is not None:
        return False
    groups = cons.batch // cons.shared
    return (prod.M == cons.N and prod.N * prod.batch == cons.K * groups) or \
        (prod.M == cons.K and prod.N * prod.batch == cons.N * groups and prod.kind != "attention")


def siblings(a: Layer, b: Layer) -> bool:
    """Whether ``b`` reads the same input as ``a`` (a shape rule: the q, k and v projections; same batch, rows and
    reduction dim, neither a conv)."""
    return a.conv is None and b.conv is None and (a.batch, a.M, a.K) == (b.batch, b.M, b.K) and a.kind == b.kind


def group_edges(group: list[Layer | VectorOp], flow: Dataflow | None = None) -> tuple[list[bool], list[bool], list[bool],
                                                                                    list[int]]:
    """Per operator: whether its input comes from an earlier GEMM of the group, whether its output stays on chip for
    a later one, whether it reads the same input as the previous GEMM (already on chip), and which earlier GEMM of
    the group makes its right operand (attention keys or values; -1: none). With the workload's ``flow`` (its
    recorded dataflow) an edge also needs a recorded path (:func:`linked`)."""
    gemm_idx = [i for i, op in enumerate(group) if isinstance(op, Layer)]
    at = [flow.index[op.name] for op in group] if flow is not None else list(range(len(group)))
    fin = [False] * len(group)
    fout = [False] * len(group)
    sib = [False] * len(group)
    ffil = [-1] * len(group)
    used: set[int] = set()  # producers already matched: same-shaped siblings (q, k, v) feed in program order
    for k, b in enumerate(gemm_idx):
        earlier = [a for a in gemm_idx[:k] if a not in used and linked(flow, at[a], at[b])]
        src = next((a for a in earlier if feeds(group[a], group[b]) or  # type: ignore[arg-type]
                    glu_feeds(group[a], group[b], group[a + 1:b])), None)  # type: ignore[arg-type]
        if src is None and flow is not None:
            src = next((a for a in earlier if reshaped(group[a], group[b])), None)  # type: ignore[arg-type]
        if src is not None:
            fout[src] = fin[b] = True
            used.add(src)
        elif k and siblings(group[gemm_idx[k - 1]], group[b]) and \
                (flow is None or flow.same_input(at[gemm_idx[k - 1]], at[b])):  # type: ignore[arg-type]
            sib[b] = True
        fsrc = next((a for a in earlier if a != src and feeds_filter(group[a], group[b])), None)  # type: ignore[arg-type]
        if fsrc is not None:
            fout[fsrc] = True
            ffil[b] = fsrc
            used.add(fsrc)
    return fin, fout, sib, ffil


def linked(flow: Dataflow | None, prod: int, cons: int) -> bool:
    """Whether the shape rules may see an edge from operator ``prod`` to ``cons`` (workload indices): always without
    a recorded dataflow, else only where ``prod``'s output reaches ``cons`` through vector ops
    (:meth:`~npukit.sim.dataflow.Dataflow.reaches`)."""
    return flow is None or flow.reaches(prod, cons)


def _feeds_left(ops: Sequence[Layer | VectorOp], prod: int, cons: int, flow: Dataflow | None) -> bool:
    """Whether GEMM ``ops[cons]`` reads GEMM ``ops[prod]``'s output as its left operand: :func:`feeds`,
    :func:`glu_feeds` over the operators between them or, with a recorded ``flow``, :func:`reshaped`; and
    :func:`linked` (indices into ``ops``, the workload's list)."""
    p, c = ops[prod], ops[cons]
    return linked(flow, prod, cons) and (feeds(p, c) or glu_feeds(p, c, ops[prod + 1:cons])  # type: ignore[arg-type]
                                         or flow is not None and reshaped(p, c))  # type: ignore[arg-type]


def _is_block_edge(prod: Layer, cons: Layer) -> bool:
    """Attention (scores -> context) and MLP (up -> down projection) edges."""
    if prod.kind == "attention" and cons.kind == "attention":
        return True
    return prod.N > prod.K and cons.K > cons.N


def fusion_groups(workload: Workload, policy: str, flow: Dataflow | None = None) -> list[tuple[int, int]]:
    """Index ranges ``(first, last)`` of the fused groups of ``policy`` (each spans >= 2 GEMMs); a policy not in
    :data:`POLICIES` is a ConfigError (it used to run as ``blocks``)."""
    if policy not in POLICIES:
        raise ConfigError(f"schedule policy {policy!r}: use one of {', '.join(POLICIES)} (or no schedule: the search)")
    if policy == "none":
        return []
    ops = workload.layers
    if flow is None:
        flow = Dataflow.of(workload)
    groups: list[tuple[int, int]] = []
    prev: int | None = None  # index of the last GEMM
    start: int | None = None
    for i, op in enumerate(ops):
        if isinstance(op, VectorOp):
            continue
        if prev is not None:
            p = ops[prev]
            edge = (_feeds_left(ops, prev, i, flow)
                    and (policy == "chain" or _is_block_edge(p, op))  # type: ignore[arg-type]
                    or policy == "chain" and siblings(p, op)  # type: ignore[arg-type]
                    and (flow is None or flow.same_input(prev, i)))
            if policy == "chain" and not edge:  # attention reads q, k, v made earlier in the open group
                first = start if start is not None else prev
                edge = any(isinstance(ops[j], Layer) and (linked(flow, j, i) and feeds_filter(ops[j], op)  # type: ignore[arg-type]
                                                         or _feeds_left(ops, j, i, flow))
                           for j in range(first, i))
            if edge:
                start = prev if start is None else start
            else:
                if start is not None:
                    groups.append((start, prev))
                start = None
        prev = i
    if start is not None and prev is not None:
        groups.append((start, prev))
    return groups


def epilogue_end(workload: Workload, last: int) -> int:
    """The index of the last vector op right after GEMM ``last`` that works on its output (an elementwise
    epilogue: as many elements as its output, e.g. a ReLU or a residual add), ``last`` if none."""
    ops = workload.layers
    gemm = ops[last]
    end = last
    while end + 1 < len(ops) and isinstance(ops[end + 1], VectorOp):
        v = ops[end + 1]
        if v.batch * v.elements != gemm.batch * gemm.M * gemm.N or v.op in ("softmax", "kv_append"):
            break
        end += 1
    return end


def branch_runs(workload: Workload, flow: Dataflow) -> list[tuple[tuple[int, ...], ...]]:
    """Runs of consecutive operators that split into two or more independent branches (the experts of a
    mixture-of-experts layer, the q, k and v projections), from the recorded dataflow: each branch is the operator
    indices it holds, in program order. Scanning in order, a GEMM that waits for nothing of the open run (by the
    recorded dataflow, gathered rows included) starts a new branch, one that waits for one branch joins it (while the
    run is one chain, a GEMM that waits only for its first operators forks it: the run starts afresh with the rest of
    the chain from its next GEMM on and this GEMM as two branches), and an operator that waits for two or more
    branches (it needs them all done) closes the run. A two-input ``add`` that accumulates onto another ``add`` of
    the run (a scatter-add of expert outputs, the residual on their sum) is ordered by its other input only: a sum
    takes its terms in any order."""
    ops = workload.layers
    runs: list[tuple[tuple[int, ...], ...]] = []
    branches: list[list[int]] = []
    owner: dict[int, int] = {}

    def gemms(b: list[int]) -> bool:
        return any(isinstance(ops[j], Layer) for j in b)

    def close() -> None:
        kept = [b for b in branches if gemms(b)]
        if len(kept) >= 2:  # a branch of vector ops only runs after the GEMM branch before it (or the first)
            for b in branches:
                if not gemms(b):
                    host = max((k for k in kept if k[0] < b[0]), key=lambda k: k[0], default=kept[0])
                    host.extend(b)
                    host.sort()
            runs.append(tuple(tuple(b) for b in kept))
        branches.clear()
        owner.clear()

    def start(groups: list[list[int]]) -> None:
        branches[:] = groups
        owner.clear()
        owner.update({j: k for k, b in enumerate(groups) for j in b})

    for i, op in enumerate(ops):
        if not branches:
            if isinstance(op, Layer):
                start([[i]])
            continue
        lo = min(owner)
        acc = frozenset(p for p in flow.producers(i) if p in owner and isinstance(ops[p], VectorOp) and
                        ops[p].op == "add") if isinstance(op, VectorOp) and op.op == "add" and op.inputs == 2 \
            else frozenset()
        waits = [j for j in flow.ancestors(i, lo, acc) if j in owner]
        deps = {owner[j] for j in waits}
        chain = [k for k, b in enumerate(branches) if gemms(b)]
        if isinstance(op, Layer) and len(chain) == 1 and deps == {chain[0]}:  # one chain so far: fork it where
            cut = max(waits)  # this GEMM's inputs are all made, from the chain's next GEMM on
            rest = [j for j in branches[chain[0]] if j > cut]
            rest = rest[next((k for k, j in enumerate(rest) if isinstance(ops[j], Layer)), len(rest)):]
            if rest:
                start([sorted(j for j in owner if j >= rest[0]), [i]])
                continue
        if len(deps) >= 2:
            close()
            if isinstance(op, Layer):
                start([[i]])
            continue
        b = deps.pop() if deps else len(branches)
        if b == len(branches):
            branches.append([])
        branches[b].append(i)
        owner[i] = b
    close()
    return runs


def clip(workload: Workload, groups: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of fused ``groups`` outside every span ``(first, last)`` of ``spans`` that still hold two or more
    GEMMs."""
    out = []
    for f, la in groups:
        cut = [i for i in range(f, la + 1) if not any(a <= i <= b for a, b in spans)]
        pieces: list[list[int]] = []
        for i in cut:
            if pieces and pieces[-1][-1] == i - 1:
                pieces[-1].append(i)
            else:
                pieces.append([i])
        out += [(p[0], p[-1]) for p in pieces if sum(isinstance(workload.layers[i], Layer) for i in p) >= 2]
    return out


def make_schedule(workload: Workload, policy: str, mode: str, epilogue: bool = False,
                  flow: Dataflow | None = None) -> Schedule:
    """The steps of (``policy``, ``mode``): fused groups as ``mode`` steps, every other operator alone (split);
    ``epilogue``: a group also takes the elementwise vector ops on its last GEMM's output (:func:`epilogue_end`),
    so that output reaches them on chip (for a simd core: over the bus, not through DRAM). A ``mode`` not in
    :data:`MODES` is a ConfigError (it used to run as ``pipeline``)."""
    if mode not in MODES:
        raise ConfigError(f"schedule mode {mode!r}: use one of {', '.join(MODES)}")
    if flow is None:
        flow = Dataflow.of(workload)
    runs: list[tuple[tuple[int, ...], ...]] = []
    if policy == "branches":
        if flow is None:
            raise ConfigError("schedule policy 'branches' needs a workload that records its dataflow (a traced model "
                              "or an ONNX file), not an operator list")
        runs = branch_runs(workload, flow)
    groups = fusion_groups(workload, "chain" if policy == "branches" else policy, flow)
    if epilogue:
        groups = [(first, epilogue_end(workload, last)) for first, last in groups]
    spans = [(min(min(b) for b in run), max(max(b) for b in run)) for run in runs]
    groups = clip(workload, groups, spans)  # a branch run wins over the groups it cuts
    steps: list[Step] = []
    items = sorted([(f, la, None) for f, la in groups] + [(a, b, run) for (a, b), run in zip(spans, runs, strict=True)],
                   key=lambda x: x[0])
    i = 0
    for first, last, run in items + [(len(workload.layers), len(workload.layers), None)]:
        while i < first:
            steps.append(Step(i, i))
            i += 1
        if first < len(workload.layers):
            steps.append(Step(first, last, "parallel", branches=run) if run else Step(first, last, mode, fused=True))
            i = last + 1
    return Schedule(policy, mode, steps)


def candidates(workload: Workload, march: MultiCoreArch, flow: Dataflow | None = None) -> list[Schedule]:
    """Every (policy, mode) schedule the search compares: ``none/split`` and, for each fusion policy with at
    least one group, ``split`` and (with two or more MAC cores) ``pipeline``; ``branches/split`` only with two or
    more MAC cores and a workload that records its dataflow (``branches/pipeline`` ranked last on every workload
    measured in docs/multicore.md, so the search leaves it out); duplicates are dropped."""
    if flow is None:
        flow = Dataflow.of(workload)
    out = [make_schedule(workload, "none", "split", flow=flow)]
    seen = {tuple(out[0].steps)}
    branched = len(march.mac_cores) > 1 and flow is not None
    for policy in ("blocks", "chain") + (("branches",) if branched else ()):
        for mode in MODES:
            if mode == "pipeline" and (len(march.mac_cores) < 2 or policy == "branches"):
                continue
            s = make_schedule(workload, policy, mode, bool(march.simd_cores), flow)
            key = tuple(s.steps)
            if key not in seen:
                seen.add(key)
                out.append(s)
    return out


def objective_value(energy_pj: float, cycles: float, objective: str) -> float:
    """The number the search minimises: ``energy`` (pJ), ``latency`` (cycles) or ``edp`` (pJ x cycles)."""
    return energy_pj if objective == "energy" else cycles if objective == "latency" else energy_pj * cycles


def split_rank(energy_pj: float, cycles: float, objective: str) -> tuple[float, float]:
    """How a split is ranked: the objective, then on a tie (several splits bound by the same DRAM port take the
    same cycles) the other of energy and cycles, as ZigZag breaks ties (equal latency: lower energy)."""
    return objective_value(energy_pj, cycles, objective), cycles if objective == "energy" else energy_pj

"""Multi-objective search over a sweep spec's space (Optuna NSGA-II or TPE) instead of the whole grid.

The space is the spec's ``[grid]`` (each key categorical over its listed values) with its ``[derived]``
keys applied; one trial is one arch configuration, simulated on every workload of the spec. The
objectives (any of :data:`OBJECTIVES`, all minimised) sum over the workloads (area is the arch's);
energy is dynamic plus static (leakage x run time, :mod:`npukit.sim.power`).

Storage: the Optuna study lives in the sweep's own SQLite file (Optuna's tables beside ``points``),
named by the spec, the method, the seed and the objectives; the simulated points are ordinary sweep
rows, so a point is never simulated twice (a grid run and a search share them). Trials are asked in
batches of ``batch`` (default: the executor's workers), their points computed on the executor (local
pool or Dask, as :func:`~npukit.sweeps.run_points`), then told. A killed search resumes: finished
trials are kept, a trial left ``RUNNING`` by the kill is marked failed and its configuration enqueued
again (its points, if they were stored, are not recomputed), and the search runs until ``budget``
trials are complete. Same spec, method, seed and batch size on a fresh database: the same trials.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..sim.errors import ConfigError
from ._exec import Executor, local_executor
from ._spec import SweepPoint, SweepSpec, expand_points
from ._store import SweepStore

METHODS = ("nsga2", "tpe")
OBJECTIVES = ("energy", "latency", "area", "edp")


def objective_values(rows: Sequence[dict[str, Any]], objectives: Sequence[str]) -> list[float]:
    """The objectives of one configuration from its rows (one per workload): energy (pJ: dynamic plus
    static, leakage x run time) and latency (s) summed over the workloads, EDP = their product (pJ s),
    area (mm^2) the arch's."""
    energy = sum(float(r["energy_total_pj"]) + float(r.get("energy_static_pj") or 0.0) for r in rows)
    latency = sum(float(r["latency_s"]) for r in rows)
    vals = {"energy": energy, "latency": latency, "edp": energy * latency,
            "area": max(float(r["area_mm2"] or 0.0) for r in rows)}
    return [vals[o] for o in objectives]


def check_objectives(objectives: Sequence[str]) -> list[str]:
    """``objectives`` checked (ConfigError with one line otherwise)."""
    objs = [o.strip() for o in objectives if o.strip()]
    bad = [o for o in objs if o not in OBJECTIVES]
    if bad or not objs or len(set(objs)) != len(objs):
        raise ConfigError(f"--objectives must be distinct names among {', '.join(OBJECTIVES)}, got {','.join(objectives)!r}")
    return objs


def config_points(spec: SweepSpec, params: dict[str, Any]) -> list[SweepPoint]:
    """The sweep points (one per workload) of one configuration of ``spec``'s grid."""
    return expand_points(replace(spec, grid={k: [v] for k, v in params.items()}))


@dataclass
class SearchSummary:
    """What a search did: ``trials`` complete trials in the study (``new`` of them now), ``configs``
    distinct configurations among them, ``points`` sweep points simulated now, ``front``: the Pareto
    trials' (params, objective values)."""

    study: str
    db: Path
    trials: int
    new: int
    configs: int
    points: int
    seconds: float
    front: list[tuple[dict[str, Any], list[float]]]

    def line(self) -> str:
        return (f"search '{self.study}': {self.trials} trials ({self.new} now, {self.configs} distinct configs), "
                f"{self.points} points simulated now in {self.seconds:.1f} s, {len(self.front)} on the Pareto front")


def study_name(spec: SweepSpec, method: str, seed: int, objectives: Sequence[str]) -> str:
    """The study's name: the spec's name, the method, the seed, the objectives and a hash of the space."""
    space = json.dumps({k: list(map(str, v)) for k, v in spec.grid.items()} | {"wl": spec.workloads,
                       "derived": sorted(spec.derived)}, sort_keys=True)
    h = hashlib.sha256(space.encode()).hexdigest()[:8]
    return f"{spec.name}-{method}-seed{seed}-{'+'.join(objectives)}-{h}"


def _sampler(method: str, seed: int, batch: int) -> Any:
    import optuna

    if method == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(20, batch))
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=20)


def run_search(
    spec: SweepSpec,
    db: str | Path,
    method: str = "nsga2",
    budget: int = 100,
    seed: int = 0,
    objectives: Sequence[str] = ("energy", "latency", "area"),
    executor: Executor | None = None,
    workers: int | None = None,
    batch: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SearchSummary:
    """Search ``spec``'s space with ``method`` until the study has ``budget`` complete trials; see the
    module docstring. ``progress(done, budget)`` after each batch."""
    import optuna

    if method not in METHODS:
        raise ConfigError(f"--search must be one of {', '.join(METHODS)}, got {method!r}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ConfigError(f"--budget must be a positive integer, got {budget!r}")
    objs = check_objectives(objectives)
    if not spec.grid:
        raise ConfigError(f"{spec.origin}: a search needs a [grid] with at least one key to vary")
    t0 = time.perf_counter()
    db = Path(db)
    with SweepStore(db, spec.multicore):  # the points table first: a file with Optuna's tables alone is not a sweep database
        pass
    own = executor is None
    ex = executor if executor is not None else local_executor(workers)
    n_batch = batch or max(1, ex.workers)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(f"sqlite:///{db.resolve()}", engine_kwargs={"connect_args": {"timeout": 60}})
    name = study_name(spec, method, seed, objs)
    study = optuna.create_study(study_name=name, storage=storage, sampler=_sampler(method, seed, n_batch),
                                directions=["minimize"] * len(objs), load_if_exists=True)
    dists = {k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in spec.grid.items()}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)):
        if t.state == optuna.trial.TrialState.RUNNING:  # left by a killed run: do it again
            storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
            study.enqueue_trial(dict(t.params), skip_if_exists=False)
    simulated = new = 0
    from . import run_points

    try:
        while (done := _complete(study)) < budget:
            trials = [study.ask(dists) for _ in range(min(n_batch, budget - done))]
            by_trial = [config_points(spec, t.params) for t in trials]
            pts = {p.key: p for ps in by_trial for p in ps}
            summary = run_points(list(pts.values()), db, executor=ex, name=spec.name)
            simulated += summary.computed
            rows = _objective_rows(db, list(pts))
            for t, ps in zip(trials, by_trial, strict=True):
                study.tell(t, objective_values([rows[p.key] for p in ps], objs))
                new += 1
            if progress is not None:
                progress(_complete(study), budget)
    finally:
        if own:
            ex.close()
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    configs = {json.dumps(t.params, sort_keys=True, default=str) for t in complete}
    front: dict[str, tuple[dict[str, Any], list[float]]] = {}
    for t in study.best_trials:  # one row per configuration (a repeated trial is one point)
        front.setdefault(json.dumps(t.params, sort_keys=True, default=str), (dict(t.params), list(t.values)))
    return SearchSummary(name, db, len(complete), new, len(configs), simulated, time.perf_counter() - t0,
                         sorted(front.values(), key=lambda f: f[1]))


def _objective_rows(db: Path, keys: list[str]) -> dict[str, dict[str, Any]]:
    """key -> the objective columns of those stored points (read-only; only the rows asked for)."""
    import sqlite3

    con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
    try:
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            cur = con.execute("SELECT key, energy_total_pj, energy_static_pj, latency_s, area_mm2 FROM points WHERE key IN "
                              f"({', '.join('?' * len(part))})", part)
            for k, e, st, t, a in cur:
                out[k] = {"energy_total_pj": e, "energy_static_pj": st, "latency_s": t, "area_mm2": a}
        return out
    finally:
        con.close()


def _complete(study: Any) -> int:
    import optuna

    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))

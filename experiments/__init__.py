"""npukit.experiments: one-command reproductions of the papers' headline claims.

Every experiment is a subpackage whose ``__init__`` imports nothing heavy (no torch) and exports
the same four names, so that the CLI only parses flags and a script can run it directly:

* ``Config``: a dataclass of every option (plain values: ints, floats, strings, tuples);
* ``add_arguments(parser)``: its own flags on an :class:`argparse.ArgumentParser` (the common
  ``--quick``, ``--out``, ``--no-progress`` and the executor flags ``--scheduler``, ``--dask-local``,
  ``--connect-timeout`` are added by the CLI, not here);
* ``config_from_args(namespace) -> Config``: every option validated, :class:`~npukit.sim.ConfigError`
  (one line naming the option and the fix) before any work;
* ``run_experiment(out_dir, config, *, executor=None, progress=True) -> list[Path]``: runs it, writes
  only inside ``out_dir`` and returns the files written (the CLI prints ``wrote PATH`` for each).
  ``executor`` is an :class:`npukit.sweeps.Executor` for its grid (None: in-process).

:data:`EXPERIMENTS` maps each name to its package and a one-line description.
"""

EXPERIMENTS: dict[str, tuple[str, str]] = {
    "psumquant": ("npukit.experiments.psumquant",
                  "PsumQuant: psum bits x scale policy on real models, plus the NPU energy table"),
    "omnimoe": ("npukit.experiments.omnimoe",
                "OmniMoE: Cartesian vs dense router cost, expert- vs token-centric crossover, LM quality"),
    "cacheedit": ("npukit.experiments.cacheedit",
                  "CacheEdit: adaptive activation cache for multi-round DiT editing vs baselines, DLE plots, NPU cost"),
}

__all__ = ["EXPERIMENTS"]

"""Mutation check: the RTL test cases catch known one-token bugs (npukit.rtl._mutations).

Each mutation (``>=`` -> ``>`` in the fold-boundary compares ``last_j``, ``last_i``, ``acc_last`` of
npu_top.v; round half up and ties to odd in psum_quantizer.v; the double-buffered weight-bank tag
ignored in pe.v; the os drain tree dropping a child's finish flag in systolic_array.v; the operand
streams' write pointer advancing without tvalid, tready high while busy, the A window gate not delayed
by the SRAM's read latency in npu_top.v) is applied to a temporary copy of the Verilog and the
standard cases are run on a 4x4 build: the cases named by the mutation must fail,
while the same cases pass on the shipped design. The runs go in parallel (one Icarus process each).
The seed is the session's (``NPUKIT_RTL_SEED``).
"""

from __future__ import annotations

import os
import shutil

import pytest

from npukit.rtl._cases import quant_stats, standard_cases
from npukit.rtl._mutations import MUTATIONS, check_all, mutated_sources, mutation_config

pytestmark = [
    pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog (iverilog) is not installed"),
    pytest.mark.rtl,
    pytest.mark.slow,
]

SEED = int(os.environ["NPUKIT_RTL_SEED"])  # drawn once per session in conftest.py unless set


def test_mutations_are_caught_and_the_original_passes(tmp_path):
    for df, tm in sorted({(m.dataflow, m.timing) for m in MUTATIONS}):  # the rounding catcher has ties of both parities
        cfg = mutation_config(df, timing=tm)
        st = quant_stats(cfg, {c.name: c for c in standard_cases(cfg, SEED)}["many_folds"])
        assert st["ties_even"] and st["ties_odd"], st
    orig, results = check_all(SEED, tmp_path)
    for r in results:
        print(f"seed {SEED}: {r['mutation']}: failing {r['failed']} ({r['wall_s']:.1f} s)")
    assert orig == {df: [] for df in orig}, f"seed {SEED}: the shipped design fails {orig}"
    missed = {r["mutation"]: r["missed"] for r in results if not r["caught"]}
    assert not missed, f"seed {SEED}: mutations pass these cases: {missed}"
    assert len(results) == len(MUTATIONS)


def test_mutations_apply_exactly_once(tmp_path):
    for i, mut in enumerate(MUTATIONS):
        srcs = {p.name: p.read_text() for p in mutated_sources(mut, tmp_path / str(i))}
        assert mut.new in srcs[mut.file] and mut.old not in srcs[mut.file]

"""Mutation check of the RTL test cases: known one-token bugs, each applied to a temporary copy of the
Verilog, must make :func:`npukit.rtl._cases.standard_cases` fail (and the original must pass).

Each mutation names the smallest configuration that shows it and the cases expected to catch it:
the fold-boundary compares (``>=`` -> ``>`` in ``last_j``, ``last_i``, ``acc_last`` of npu_top.v)
only differ when a last fold is full (the ``*_fold*`` cases); the rounding-mode errors in
psum_quantizer.v (round half up, ties to odd) only differ on exact ties (``many_folds``).

A double-buffered mutation (activations ignore their weight-bank tag) runs on a double-buffered build,
and one of the os drain tree (a level forwards only its left child's finish flag) on an os build.
Three mutations of the operand streams and SRAMs (the write pointer advancing without tvalid, tready
high while busy, the A window gate not delayed by the SRAM's read latency) fail every case: the
testbench leaves idle periods without tvalid before and between the loads and offers junk while busy.

``python -m npukit.rtl._mutations [--seed S] [--build-dir DIR]`` prints which cases catch each one.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ._cases import standard_cases, suite_dims
from ._config import RtlConfig, source_paths
from ._runner import run_gemm_suite


@dataclass(frozen=True)
class Mutation:
    """One textual change of one Verilog file: ``old`` (must occur exactly once) becomes ``new``."""

    name: str
    file: str
    old: str
    new: str
    dataflow: str  # the configuration that shows it: 4x4, this dataflow, saturate, P = 16
    catchers: tuple[str, ...]  # cases that must fail on it
    timing: str = "scalesim"  # the build's timing


FOLD_CATCHERS = ("single_fold", "many_folds")
STREAM_CATCHERS = ("random", "single_fold", "many_folds")
MUTATIONS = (
    Mutation("last_j >= -> >", "npu_top.v", "wire last_j   = (nb + C_X >= n_x);", "wire last_j   = (nb + C_X > n_x);",
             "ws", FOLD_CATCHERS),
    Mutation("last_i (ws) >= -> >", "npu_top.v", "(DATAFLOW == 0) ? (ib + R_X >= k_x)", "(DATAFLOW == 0) ? (ib + R_X > k_x)",
             "ws", FOLD_CATCHERS),
    Mutation("last_i (os) >= -> >", "npu_top.v", ": (ib + R_X >= m_x);", ": (ib + R_X > m_x);", "os", FOLD_CATCHERS),
    Mutation("acc_last >= -> >", "npu_top.v", "(DATAFLOW == 0) ? (ib_eff + R_X >= k_x)",
             "(DATAFLOW == 0) ? (ib_eff + R_X > k_x)", "ws", FOLD_CATCHERS),
    Mutation("round half up", "psum_quantizer.v", "((rem > half) || ((rem == half) && shifted[0]))", "(rem >= half)",
             "ws", ("many_folds",)),
    Mutation("ties to odd", "psum_quantizer.v", "((rem == half) && shifted[0])", "((rem == half) && !shifted[0])",
             "ws", ("many_folds",)),
    # double-buffered: activations ignore their bank tag (every fold after the first uses stale weights)
    Mutation("bank tag ignored (double-buffered)", "pe.v", "assign w_use = a_tag_in[0] ? b1_q : b_q;",
             "assign w_use = b_q;", "ws", ("random", "many_folds"), "double-buffered"),
    # os drain tree: a level passes on only its left child's finish flag (odd rows never come out)
    Mutation("drain tree valid (os)", "systolic_array.v", "else if (en) f <= tf[LI] | tf[RI];", "else if (en) f <= tf[LI];",
             "os", ("random", "single_fold")),
    # operand input streams: the write pointer advances whenever the stream is ready, also without tvalid
    # (every idle period without a word skips an address)
    Mutation("A write pointer without tvalid", "npu_top.v", "else if (a_xfer) a_wptr <= a_wptr + 1'b1;",
             "else if (s_a_tready) a_wptr <= a_wptr + 1'b1;", "ws", STREAM_CATCHERS),
    # tready high while a run uses the buffers: the junk offered while busy is taken (and overwrites words)
    Mutation("B tready while busy (os)", "npu_top.v", "assign s_b_tready = !busy && !start;", "assign s_b_tready = !start;",
             "os", STREAM_CATCHERS),
    # the SRAM's read latency ignored by the A window gate: it opens and closes one period early
    Mutation("A window not delayed with the SRAM read", "npu_top.v",
             "assign a_word = win_d ? a_rdata : {ROWS*DATA_W{1'b0}};\n            assign b_word = b_rdata;",
             "assign a_word = a_win ? a_rdata : {ROWS*DATA_W{1'b0}};\n            assign b_word = b_rdata;", "ws",
             STREAM_CATCHERS),
)


def mutation_config(dataflow: str, rows: int = 4, cols: int = 4, timing: str = "scalesim") -> RtlConfig:
    """The build a mutation is checked on: rows x cols, saturate, P = 16, sized for the whole suite."""
    probe = RtlConfig(rows=rows, cols=cols, dataflow=dataflow, pe_psum_bits=16)
    m, n, k = suite_dims(probe)
    return RtlConfig(rows=rows, cols=cols, dataflow=dataflow, pe_psum_bits=16, max_m=m, max_n=n, max_k=k, timing=timing)


def mutated_sources(mutation: Mutation, dst: str | os.PathLike) -> list[Path]:
    """Copy the design into ``dst`` with ``mutation`` applied; returns the copied paths."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for src in source_paths():
        text = src.read_text()
        if src.name == mutation.file:
            if text.count(mutation.old) != 1:
                raise ValueError(f"mutation {mutation.name!r}: {mutation.old!r} occurs {text.count(mutation.old)} times "
                                 f"in {src.name}, not once")
            text = text.replace(mutation.old, mutation.new)
        (dst / src.name).write_text(text)
        out.append(dst / src.name)
    return out


def failing_cases(cfg: RtlConfig, seed: int, build_root: str | os.PathLike, sources: list[Path] | None = None) -> list[str]:
    """Names of the standard cases that fail on ``sources`` (default: the shipped design)."""
    res = run_gemm_suite(cfg, standard_cases(cfg, seed), build_root, sources=sources)
    return [c["name"] for c in res.cases if not c["passed"]]


def check_mutation(mutation: Mutation, seed: int, work: str | os.PathLike) -> dict:
    """Run the suite on the mutated design (in ``work/<slug>``): the failing cases and wall time."""
    slug = "".join(ch if ch.isalnum() else "_" for ch in mutation.name)
    base = Path(work) / slug
    t0 = time.perf_counter()
    srcs = mutated_sources(mutation, base / "src")
    failed = failing_cases(mutation_config(mutation.dataflow, timing=mutation.timing), seed, base / "build", srcs)
    missed = [c for c in mutation.catchers if c not in failed]
    return {"mutation": mutation.name, "failed": failed, "missed": missed, "caught": not missed,
            "wall_s": time.perf_counter() - t0}


def check_all(seed: int, work: str | os.PathLike, workers: int | None = None) -> tuple[dict[str, list[str]], list[dict]]:
    """The original design on each mutation configuration ({dataflow: failing cases}, expected empty)
    and :func:`check_mutation` of every mutation, run ``workers`` at a time (default: one per CPU;
    each run is its own Icarus process)."""
    work = Path(work)
    builds = sorted({(m.dataflow, m.timing) for m in MUTATIONS})
    with ThreadPoolExecutor(max_workers=workers or max(1, min(len(MUTATIONS), os.cpu_count() or 1))) as pool:
        orig = {f"{df} {tm}": pool.submit(failing_cases, mutation_config(df, timing=tm), seed, work / f"original_{df}_{tm}")
                for df, tm in builds}
        muts = [pool.submit(check_mutation, m, seed, work) for m in MUTATIONS]
        return {df: f.result() for df, f in orig.items()}, [f.result() for f in muts]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--build-dir", default="sim_build/mutations")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    orig, results = check_all(args.seed, args.build_dir)
    ok = not any(orig.values())
    for df, failed in orig.items():
        print(f"original ({df}): {'PASS' if not failed else 'FAIL ' + ', '.join(failed)}")
    for r in results:
        ok &= r["caught"]
        verdict = "caught" if r["caught"] else f"MISSED by {', '.join(r['missed'])}"
        print(f"{r['mutation']}: {verdict}; failing cases: {', '.join(r['failed']) or 'none'} ({r['wall_s']:.1f} s)")
    print(f"seed {args.seed}, {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

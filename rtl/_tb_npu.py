"""cocotb testbench of npu_top: GEMMs bit-exact and cycle-exact against the cycle-level model.

Run by :mod:`npukit.rtl._runner` inside Icarus (never imported by pytest directly). The job file
named by ``$NPUKIT_RTL_JOB`` holds the build's :class:`RtlConfig` and the cases (A, B, quant,
seed); the results are written as JSON to the job's ``result_path``.

Cycle mapping (documented contract between RTL time and the model's cycles): the rising clock
edge that samples ``start = 1`` begins RTL period 0; period p is the clock period that begins
at the p-th rising edge after it. The PEs perform contract cycle t's MACs in period t (their
registers update at the edge that ends it). The testbench samples npu_top's outputs at the
falling edge inside each period; an output seen in period p left the array in contract cycle
p - L with L = ``cfg.out_latency`` (ws/is: 3, the operand SRAM's read, the array's bottom psum
register and the accumulator's output register; os: 3 + ceil(log2(R)), the SRAM read, the PE's
register, the registered drain tree's levels and the output register). That cycle must equal the
model's ``out_cycle``. npu_top's ``cycles`` port holds the index of the run's last contract cycle (in
both timings); the RTL's compute cycles are that index through
:func:`npukit.sim.datapath.cycle_count` (scalesim: the index, double-buffered: index + 1), reported as
``rtl_cycles`` and required to equal the model's ``cycles``; ``done`` must be seen in period
(last cycle index) + L.

Operand input streams: before each GEMM the testbench sends the A and B buffer words over
``s_a_*`` / ``s_b_*`` (valid/ready; with the job's ``gap_prob`` > 0 each stream holds tvalid low with
that probability per period and drives junk on tdata then), raises ``start`` in the period after the
last word was taken, and while the run is busy offers junk words that must not be taken: a
``*_tready`` seen high while busy is a protocol problem (and a taken junk word would corrupt a buffer).

Output backpressure: with the job's ``stall_prob`` > 0 the testbench drives ``out_ready`` low with that
probability in every period (seeded by the case's seed). A period in which some ``out_vld`` lane is
high and ``out_ready`` is low is a stall: nothing is transferred and the whole design holds. Periods
are then counted without the stalls before them: an output transferred in period p with s stalls
before it left the array in contract cycle p - s - L, and ``done`` must be seen in period
(last cycle index) + L + (all stalls); values and cycles must still equal the model's.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

from npukit.sim.datapath import cycle_count

from ._config import RtlConfig
from ._layout import operand_words, unpack_lanes


def model_result(cfg: RtlConfig, a: np.ndarray, b: np.ndarray, quant: tuple[int, int] | None):
    """The cycle-level model's result for one case (same parameters as the RTL build)."""
    from npukit.sim.cycle import run_gemm

    return run_gemm(
        a, b, cfg.rows, cfg.cols, dataflow=cfg.dataflow, data_bits=cfg.data_bits, pe_psum_bits=cfg.pe_psum_bits,
        overflow=cfg.overflow, timing=cfg.timing, psum_buffer_bits=cfg.psum_buffer_bits, quant=quant,
    )


def rtl_compute_cycles(cfg: RtlConfig, last_cycle: int | None) -> int | None:
    """The RTL's compute cycles from its ``cycles`` port (the last cycle's index; None when x/z), in the
    one convention of every tool (:func:`npukit.sim.datapath.cycle_count`)."""
    return None if last_cycle is None else cycle_count(last_cycle, cfg.timing)


def compare(cfg: RtlConfig, got: dict, rtl_last: int | None, done_period: int, ref, seed: int, name: str,
            protocol: list[tuple[int, str]] | None = None) -> list[str]:
    """Mismatch messages (empty when bit- and cycle-exact), first mismatch (in time) first. ``rtl_last``:
    npu_top's ``cycles`` port at the end of the run (the index of the last cycle; None when x/z)."""
    problems: list[tuple[int, str]] = list(protocol or [])
    m_dim, n_dim = ref.out.shape
    for (m, n), (val, cyc) in got.items():
        if not (0 <= m < m_dim and 0 <= n < n_dim):
            problems.append((cyc, f"unexpected output ({m}, {n}) = {val} at cycle {cyc}"))
    for m in range(m_dim):
        for n in range(n_dim):
            want_v, want_c = int(ref.out[m, n]), int(ref.out_cycle[m, n])
            if (m, n) not in got:
                problems.append((want_c, f"output ({m}, {n}) never appeared (model: {want_v} at cycle {want_c})"))
                continue
            val, cyc = got[(m, n)]
            if val != want_v or cyc != want_c:
                shown = "x" if val is None else val
                problems.append(
                    (min(cyc, want_c), f"output ({m}, {n}): RTL {shown} at cycle {cyc}, model {want_v} at cycle {want_c}")
                )
    problems.sort(key=lambda p: p[0])
    msgs = [p[1] for p in problems]
    rtl_cycles = rtl_compute_cycles(cfg, rtl_last)
    if rtl_cycles != int(ref.cycles):
        msgs.append(f"RTL cycles {rtl_cycles} (last cycle {rtl_last}) != model cycles {int(ref.cycles)}")
    elif done_period != rtl_last + cfg.out_latency:
        lat = cfg.out_latency
        msgs.append(f"done seen in period {done_period}, expected last cycle + {lat} = {rtl_last + lat}")
    return [f"[{name}, seed {seed}] {s}" for s in msgs]


def _uint(value) -> int | None:
    """Unsigned value of a signal (Logic or LogicArray); None when it holds x or z."""
    s = str(value)
    return int(s, 2) if s and set(s) <= {"0", "1"} else None


STREAMS = ("s_a", "s_b")


def _junk(rng: np.random.Generator, bits: int) -> int:
    """A random ``bits``-bit word."""
    return int.from_bytes(rng.bytes((bits + 7) // 8), "little") & ((1 << bits) - 1)


async def stream_operands(dut, words: dict[str, list[int]], rng: np.random.Generator, gap_prob: float,
                          bits: dict[str, int], limit: int, counts: dict[str, int]) -> list[str]:
    """Send the operand words over npu_top's input streams (AXI-Stream-like, one word per handshake)
    until every word is taken; returns protocol problems. In every period each stream holds tvalid low
    with probability ``gap_prob`` (tdata then carries junk that must not be taken); a word counts as
    taken at a rising edge where tvalid and tready were both high (tvalid, once high, stays high with
    the same word until then). Ends at a falling edge after the last transfer with both tvalid low.
    ``counts["gaps"]`` counts the stream-periods with tvalid low while words were left."""
    sent = {s: 0 for s in STREAMS}
    offered = {s: False for s in STREAMS}  # tvalid driven during the period that just ended
    ready = {s: False for s in STREAMS}
    for _ in range(limit):
        await FallingEdge(dut.clk)
        for s in STREAMS:
            if offered[s] and ready[s]:
                sent[s] += 1  # the rising edge just passed took the word
        if all(sent[s] == len(words[s]) for s in STREAMS):
            for s in STREAMS:
                getattr(dut, f"{s}_tvalid").value = 0
            return []
        for s in STREAMS:
            left = sent[s] < len(words[s])
            hold = offered[s] and not ready[s]  # AXI-Stream: an offered word stays until it is taken
            valid = left and (hold or gap_prob <= 0 or rng.random() >= gap_prob)
            counts["gaps"] += int(left and not valid)
            getattr(dut, f"{s}_tvalid").value = int(valid)
            getattr(dut, f"{s}_tdata").value = words[s][sent[s]] if valid else _junk(rng, bits[s])
            offered[s] = valid
            ready[s] = _uint(getattr(dut, f"{s}_tready").value) == 1
        if _uint(dut.busy.value) != 0:
            return [f"busy is {dut.busy.value} while the operands are loading"]
    return [f"the input streams took {sent} words of {({s: len(w) for s, w in words.items()})} within {limit} periods"]


async def run_case(dut, cfg: RtlConfig, a: np.ndarray, b: np.ndarray, quant, dim_w: int,
                   limit: int, stall_prob: float = 0.0, gap_prob: float = 0.0,
                   seed: int = 0, counts: dict[str, int] | None = None, index: int = 0
                   ) -> tuple[dict, int | None, int, list[tuple[int, str]], float, int]:
    """Drive one GEMM; returns ({(m, n): (value or None for x/z, contract cycle)}, RTL cycles,
    done period (without stalls), [(cycle, problem)] for protocol problems (x on out_vld, duplicates,
    no done, an input stream ready while busy), wall seconds from start to done (the run without the
    operand streaming), stall periods. With ``gap_prob`` > 0 the operand streams have random tvalid gaps
    and, while the run is busy, offer junk words (tvalid high in about half the periods) that must not
    be taken (tready low); ``counts`` gets "gaps" (see stream_operands) and "junk" (junk words offered
    while busy)."""
    counts = {"gaps": 0, "junk": 0} if counts is None else counts
    rng = np.random.default_rng([seed, 0x5A11, index])  # ``index``: the case's place in its suite, so that the
    gap_rng = np.random.default_rng([seed, 0x6A95, index])  # cases of one seed draw different stalls and gaps
    a_words, b_words = operand_words(a, b, cfg.rows, cfg.cols, cfg.dataflow, cfg.data_bits)
    bits = {"s_a": cfg.rows * cfg.data_bits, "s_b": cfg.cols * cfg.data_bits}
    load_problems = await stream_operands(dut, {"s_a": a_words, "s_b": b_words}, gap_rng, gap_prob, bits,
                                          limit=20 * (len(a_words) + len(b_words)) + 100, counts=counts)
    if load_problems:
        return {}, None, -1, [(-1, p) for p in load_problems], 0.0, 0
    m, n, k = cfg.hw_dims(a.shape[0], b.shape[1], a.shape[1])
    dut.cfg_m.value = m
    dut.cfg_n.value = n
    dut.cfg_k.value = k
    dut.cfg_qen.value = int(quant is not None)
    mult, shift = quant if quant is not None else (1, 0)
    dut.cfg_mult.value = mult & ((1 << cfg.mult_bits) - 1)
    dut.cfg_shift.value = shift
    dut.start.value = 1
    t0 = time.perf_counter()
    await FallingEdge(dut.clk)  # the rising edge just passed sampled start: we are in period 0
    dut.start.value = 0
    got: dict[tuple[int, int], tuple[int | None, int]] = {}
    problems: list[tuple[int, str]] = []
    out_w, cols = cfg.out_width, cfg.cols
    swap = cfg.dataflow == "is"  # the hardware computes out^T: its (row, col) is our (col, row)
    lat = cfg.out_latency  # periods from a contract cycle to the output ports
    period = 0
    stalls = 0
    while True:
        ready = int(stall_prob <= 0 or rng.random() >= stall_prob)
        dut.out_ready.value = ready
        if gap_prob > 0:  # junk on the input streams while busy: tready must stay low
            busy_now = _uint(dut.busy.value) == 1
            for s in STREAMS:
                junk = busy_now and gap_rng.random() < 0.5
                getattr(dut, f"{s}_tvalid").value = int(junk)
                if junk:
                    counts["junk"] += 1
                    getattr(dut, f"{s}_tdata").value = _junk(gap_rng, bits[s])
                    if _uint(getattr(dut, f"{s}_tready").value) != 0:
                        problems.append((period - stalls - lat, f"{s}_tready is high while busy (period {period})"))
        vbits = _uint(dut.out_vld.value)
        if vbits is None:
            problems.append((period - lat, f"out_vld is {dut.out_vld.value} at cycle {period - lat}"))
            break
        if vbits and not ready:  # a stall: the design holds this period
            stalls += 1
            period += 1
            if period > limit + stalls:
                problems.append((period - lat, f"npu_top did not finish within {limit} cycles"))
                break
            await FallingEdge(dut.clk)
            continue
        period -= stalls  # the contract period of this transfer
        if vbits:
            lanes = [c for c in range(cols) if vbits >> c & 1]
            vals = unpack_lanes(str(dut.out_data.value), out_w, lanes, signed=True)
            rows = unpack_lanes(str(dut.out_row.value), dim_w, lanes, signed=False)
            folds = unpack_lanes(str(dut.out_fold.value), dim_w, lanes, signed=False)
            for c in lanes:
                if rows[c] is None or folds[c] is None:
                    problems.append((period - lat, f"lane {c} has an x/z index at cycle {period - lat}"))
                    continue
                col = folds[c] * cols + c
                key = (col, rows[c]) if swap else (rows[c], col)
                if key in got:
                    problems.append((period - lat, f"output {key} emitted twice (cycles {got[key][1]} and "
                                                       f"{period - lat})"))
                got[key] = (vals[c], period - lat)
        if _uint(dut.done.value) == 1:
            break
        period += stalls + 1
        if period > limit + stalls:
            problems.append((period - stalls - lat, f"npu_top did not finish within {limit} cycles"))
            break
        await FallingEdge(dut.clk)
    dut.out_ready.value = 1
    for s in STREAMS:
        getattr(dut, f"{s}_tvalid").value = 0
    return got, _uint(dut.cycles.value), period, problems, time.perf_counter() - t0, stalls


@cocotb.test()
async def gemm_cases(dut):
    """Every case of the job: outputs and output cycles equal the model's."""
    job = json.loads(Path(os.environ["NPUKIT_RTL_JOB"]).read_text())
    cfg = RtlConfig(**job["config"])
    dim_w = cfg.parameters()["DIM_W"]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for sig in ("s_a_tvalid", "s_b_tvalid", "start", "cfg_qen"):
        getattr(dut, sig).value = 0
    dut.out_ready.value = 1
    stall_prob = float(job.get("stall_prob", 0.0))
    gap_prob = float(job.get("gap_prob", 0.0))
    dut.rst.value = 1
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    results, failures = [], []
    for index, case in enumerate(job["cases"]):
        a = np.array(case["a"], dtype=np.int64)
        b = np.array(case["b"], dtype=np.int64)
        quant = tuple(case["quant"]) if case["quant"] is not None else None
        t0 = time.perf_counter()
        ref = model_result(cfg, a, b, quant)
        t_model = time.perf_counter() - t0
        t0 = time.perf_counter()
        counts = {"gaps": 0, "junk": 0}
        got, rtl_last, done_period, protocol, t_run, stalls = await run_case(
            dut, cfg, a, b, quant, dim_w, limit=int(ref.cycles) + 1000, stall_prob=stall_prob, gap_prob=gap_prob,
            seed=case["seed"], counts=counts, index=index)
        t_rtl = time.perf_counter() - t0
        msgs = compare(cfg, got, rtl_last, done_period, ref, case["seed"], case["name"], protocol)
        rtl_cycles = rtl_compute_cycles(cfg, rtl_last)
        results.append({
            "name": case["name"], "seed": case["seed"], "m": int(a.shape[0]), "n": int(b.shape[1]), "k": int(a.shape[1]),
            "quant": case["quant"], "passed": not msgs, "rtl_cycles": rtl_cycles, "model_cycles": int(ref.cycles),
            "outputs": len(got), "first_mismatch": msgs[0] if msgs else None, "mismatches": len(msgs),
            "rtl_wall_s": t_rtl, "rtl_run_wall_s": t_run, "model_wall_s": t_model, "stalls": stalls,
            "input_gaps": counts["gaps"], "junk_offered": counts["junk"],
        })
        failures.extend(msgs[:1])
        await FallingEdge(dut.clk)
    with open(job["result_path"] + ".tmp", "w") as fh:
        json.dump({"config": job["config"], "cases": results}, fh)
    os.replace(job["result_path"] + ".tmp", job["result_path"])
    assert not failures, "; ".join(failures)

`timescale 1ns/1ps
// npu_top: streams one tiled GEMM out = A (M x K) @ B (K x N) through systolic_array,
// psum_quantizer and accumulator with the fold order and timing of the cycle contract
// (TIMING = 0: scalesim; 1: double-buffered, ws only), plain Verilog-2005.
//
// Operands arrive over two AXI-Stream-like input streams, s_a_* (ROWS lanes) and s_b_* (COLS lanes):
// a word is taken at a rising edge where tvalid and tready are both high and written to the stream's
// buffer at the next address (0, 1, 2, ... for each GEMM: the write pointers return to 0 when a run
// starts). tready = !busy && !start: words are taken only while idle, never at the edge that starts a
// run nor while a run or its drain uses the buffers. The host streams all of a GEMM's words (in the
// buffer order below; the streams are independent, any gaps) and raises start after the last one was
// taken; the hardware does not count the words (words beyond a buffer's 2**A_AW / 2**B_AW wrap around).
// The buffers are single-port SRAMs (sram_sp, one read or one write per period, read latency 1 period):
// written only while idle, read only while busy, one word per period each, so one access per period.
// Buffer order (word address: lanes):
//   ws: A[i*M + m]         lane r = A[m, i*R + r]          (K-fold i, row m)
//       B[(j*kf + i)*R + t] lane c = B[i*R + R-1-t, j*C + c] (column fold j, K-fold i; tile rows
//                              in load order: row R-1 first)
//   os: A[i*K + k]         lane r = A[i*R + r, k]          (row fold i)
//       B[j*K + k]         lane c = B[k, j*C + c]          (column fold j)
//   Lanes outside the matrices must be sent as zeros.
// Run: start (sampled at a rising edge in idle, not stalled) captures cfg_* and begins contract cycle 0
// in the clock period that starts at that edge (period 0). The controller reads the buffers on the
// contract's schedule; each word enters the array one period after its read (the SRAM's read latency),
// with its control delayed alike, so the array runs the contract's schedule one period late, and so does
// the psum path (its fold attribution is registered once more; busy covers that extra flush period). Fold f is contract
// cycles [f*T, (f+1)*T) (the controller's periods; the local times below are contract cycles):
//   ws: T = 2R + C + M - 2, folds j outer, i inner; local [0, R): weights shift in (row R-1-t at t);
//       A[m, i*R + r] enters row r at local R + m + r; psum (m, c) leaves at local 2R - 1 + m + c.
//   os: T = R + C + K - 2, folds i outer, j inner; A[i*R + r, k] enters row r and B[k, j*C + c]
//       enters column c at local k + r / k + c; PE(r, c) is final at local K - 1 + r + c.
//   ws double-buffered (TIMING = 1): T = R + C + M - 2, the same local times: fold f + 1 loads its
//       weights into the other bank (bank (f + 1) % 2) while fold f's last activations and psums
//       are still in the array (the activations carry their fold's bank); after the last fold R
//       more cycles run, so the last cycle is R + F*T - 1 (R + F*T compute cycles). A fold's psums
//       arrive up to its local T + R: with C = 1 and M = 1 (T = R) at local 0 two folds later.
// A psum leaving the array in contract cycle t is in the array's bottom register (ws) in period
// t + 2, or (os) in its PE's register in period t + 2 and at the root of the column's registered
// drain tree in period t + 2 + DRAIN_LAT (DRAIN_LAT = ceil(log2(ROWS)), see systolic_array), goes
// through psum_quantizer (cfg_qen, cfg_mult, cfg_shift) and accumulator, and a final output is on
// out_* in period t + OUT_LAT (OUT_LAT = 3 for ws, 3 + DRAIN_LAT for os), one lane per column:
// out_vld[c], out_row[c] (the output's row), out_fold[c] (its column fold j: column j*COLS + c),
// out_data[c] (OUT_W bits: ws the B-bit accumulator; os max(P, B) bits, the final P-bit value or,
// with cfg_qen, its quantized B-bit value). `cycles` = index of the last run cycle = F*T - 1
// (SCALE-Sim's count; double-buffered R + F*T - 1, one less than that timing's compute cycles, which
// count cycles); `done` is high for the one period cycles + OUT_LAT.
// The is dataflow runs on this ws hardware with A' = B^T, B' = A^T (it then emits out^T).
// DATAFLOW: 0 = weight stationary, 1 = output stationary. OVERFLOW: 0 = saturate, 1 = wrap.
// DIM_W (<= 16) must hold max(M, N, K) + max(R, C) and T; the SRAMs hold 2**A_AW, 2**B_AW words and the
// accumulator 2**ACC_AW rows (ws needs M <= 2**ACC_AW).
module npu_top #(
    parameter ROWS     = 4,
    parameter COLS     = 4,
    parameter DATA_W   = 8,
    parameter PSUM_W   = 32,
    parameter ACC_W    = 32,
    parameter MULT_W   = 16,
    parameter SHIFT_W  = 6,
    parameter DATAFLOW = 0,
    parameter OVERFLOW = 0,
    parameter TIMING   = 0,
    parameter DIM_W    = 12,
    parameter A_AW     = 6,
    parameter B_AW     = 6,
    parameter ACC_AW   = 5,
    parameter CYC_W    = 32,
    // output width: ws the accumulator's B bits; os max(P, B) (P-bit finals, or B-bit quantized)
    parameter OUT_W    = (DATAFLOW == 0) ? ACC_W : ((PSUM_W > ACC_W) ? PSUM_W : ACC_W)
) (
    input  wire                      clk,
    input  wire                      rst,
    // operand input streams (see the header): word w of a stream is written to buffer address w
    input  wire                      s_a_tvalid,
    output wire                      s_a_tready,
    input  wire [ROWS*DATA_W-1:0]    s_a_tdata,
    input  wire                      s_b_tvalid,
    output wire                      s_b_tready,
    input  wire [COLS*DATA_W-1:0]    s_b_tdata,
    input  wire [DIM_W-1:0]          cfg_m,
    input  wire [DIM_W-1:0]          cfg_n,
    input  wire [DIM_W-1:0]          cfg_k,
    input  wire                      cfg_qen,
    input  wire [MULT_W-1:0]         cfg_mult,
    input  wire [SHIFT_W-1:0]        cfg_shift,
    input  wire                      start,
    input  wire                      out_ready,  // output backpressure (see the header)
    output wire                      busy,
    output reg                       done,
    output wire [CYC_W-1:0]          cycles,
    output wire [COLS-1:0]           out_vld,
    output reg  [COLS*DIM_W-1:0]     out_row,
    output reg  [COLS*DIM_W-1:0]     out_fold,
    output wire [COLS*OUT_W-1:0]     out_data
);
    localparam Y_W  = (PSUM_W > ACC_W) ? PSUM_W : ACC_W;
    localparam AS_W = (DATAFLOW == 0) ? DATA_W : DATA_W + 1;  // a skew lane: data (+ os valid)
    localparam BS_W = DATA_W + 1;                               // b skew lane (os): data + valid
    localparam IX_W = DIM_W + 16;  // index arithmetic: wide enough that no fold-index bit is cut off
    // os drain-tree latency, ceil(log2(ROWS)) (the same chain as in systolic_array); ws: none
    localparam DRAIN_LAT = (DATAFLOW == 0 || ROWS <= 1) ? 0 : (ROWS <= 2) ? 1 : (ROWS <= 4) ? 2 : (ROWS <= 8) ? 3
                         : (ROWS <= 16) ? 4 : (ROWS <= 32) ? 5 : (ROWS <= 64) ? 6 : (ROWS <= 128) ? 7
                         : (ROWS <= 256) ? 8 : (ROWS <= 512) ? 9 : (ROWS <= 1024) ? 10 : (ROWS <= 2048) ? 11
                         : (ROWS <= 4096) ? 12 : (ROWS <= 8192) ? 13 : 14;
    // sized copies of the (32-bit) integer parameters for arithmetic on DIM_W / IX_W-bit vectors
    // (IX_W <= 32: DIM_W <= 16 holds every build npukit.rtl makes)
    localparam [IX_W-1:0]  R_X  = ROWS[IX_W-1:0];
    localparam [IX_W-1:0]  C_X  = COLS[IX_W-1:0];
    localparam [DIM_W-1:0] R_D  = ROWS[DIM_W-1:0];
    localparam [DIM_W-1:0] C_D  = COLS[DIM_W-1:0];
    localparam [DIM_W-1:0] DL_D = DRAIN_LAT;
    // local cycles of a fold that still see the previous fold's psums arrive (ws double-buffered:
    // R, os: the drain tree's latency), and the cycles that run after the last fold (ws
    // double-buffered: R, counted by tail_run); the drain after the last fold lasts PREV_W + 1 periods
    localparam [DIM_W-1:0] PREV_W = (DATAFLOW == 0 && TIMING != 0) ? R_D : DL_D;
    localparam [DIM_W-1:0] TWO  = 2;
    localparam [DIM_W-1:0] T_WS = (TIMING != 0) ? R_D + C_D - TWO     // ws fold length T = T_WS + M
                                                : R_D + R_D + C_D - TWO;
    localparam [DIM_W-1:0] T_OS = R_D + C_D - TWO;        // os fold length T = T_OS + K

    // ---------------- output backpressure ----------------
    // The outputs are a valid/ready stream: while some out_vld lane is high and out_ready is low,
    // en = 0 stalls every register of the design (array, skews, controller, accumulator, outputs),
    // so the outputs hold and the run resumes unchanged: every later period shifts by one.
    wire en = out_ready || !(|out_vld);

    // ---------------- controller ----------------
    reg [DIM_W-1:0]  m_q, n_q, k_q;
    reg              qen_q;
    reg [MULT_W-1:0] mult_q;
    reg [SHIFT_W-1:0] shift_q;
    reg              run_q, drain_q;
    reg              flush_q;     // the period after the drain: the psum path's last (one period behind)
    reg [DIM_W-1:0]  lt;          // local cycle within the fold
    reg [CYC_W-1:0]  cyc;         // absolute contract cycle
    // fold indices are counters (not i*R / j*C bases) so that no register bit is constant
    reg [DIM_W-1:0]  fi;          // spatial-row fold i: K-fold (ws) or row fold (os)
    reg [DIM_W-1:0]  fj;          // column fold j
    reg [A_AW-1:0]   a_base;      // first A word of the fold: ws i*M, os i*K
    reg [B_AW-1:0]   b_base;      // ws: weight read pointer (+1 per load cycle), os: j*K
    reg [DIM_W-1:0]  p_fi, p_fj;  // the previous fold (its last psums arrive at local 0)
    reg              p_have;
    wire [IX_W-1:0]  ib = {{(IX_W-DIM_W){1'b0}}, fi} * R_X;
    wire [IX_W-1:0]  nb = {{(IX_W-DIM_W){1'b0}}, fj} * C_X;
    // zero-extended IX_W-bit copies: pointer and index sums are computed at IX_W bits and cut to
    // their register's width explicitly (no implicit width change anywhere: Verilator -Wall clean)
    wire [IX_W-1:0]  m_x  = {{(IX_W-DIM_W){1'b0}}, m_q};
    wire [IX_W-1:0]  n_x  = {{(IX_W-DIM_W){1'b0}}, n_q};
    wire [IX_W-1:0]  k_x  = {{(IX_W-DIM_W){1'b0}}, k_q};
    wire [IX_W-1:0]  lt_x = {{(IX_W-DIM_W){1'b0}}, lt};
    wire [IX_W-1:0]  ab_x = {{(IX_W-A_AW){1'b0}}, a_base};
    wire [IX_W-1:0]  bb_x = {{(IX_W-B_AW){1'b0}}, b_base};
    // (the next fold's A base; os: B base; cut to the buffer's address width: upper bits unread)
    /* verilator lint_off UNUSEDSIGNAL */
    wire [IX_W-1:0]  a_next = ab_x + ((DATAFLOW == 0) ? m_x : k_x);
    wire [IX_W-1:0]  b_next = bb_x + k_x;
    /* verilator lint_on UNUSEDSIGNAL */

    // T, the fold length (not a register: T's low bits would duplicate m_q's / k_q's)
    wire [DIM_W-1:0] t_len = (DATAFLOW == 0) ? T_WS + m_q : T_OS + k_q;
    wire fold_end = run_q && (lt == t_len - 1'b1);
    wire last_i   = (DATAFLOW == 0) ? (ib + R_X >= k_x) : (ib + R_X >= m_x);
    wire last_j   = (nb + C_X >= n_x);
    wire last_fold = last_i && last_j;

    assign busy = run_q | drain_q | flush_q;
    wire run_start = en && !busy && start;

    // ---------------- operand input streams ----------------
    // A word is taken at a rising edge with tvalid & tready and written at the stream's write
    // pointer, which then advances; the pointers return to 0 when a run starts (and at rst), so each
    // GEMM's words go to addresses 0, 1, ... tready is high exactly while idle with start low: no word
    // is taken at the edge that starts a run nor while a run (or its drain) uses the buffers, so a
    // buffer sees writes only while idle and reads only while busy (one access per period).
    assign s_a_tready = !busy && !start;
    assign s_b_tready = !busy && !start;
    wire a_xfer = s_a_tvalid && s_a_tready;
    wire b_xfer = s_b_tvalid && s_b_tready;
    reg [A_AW-1:0] a_wptr;
    reg [B_AW-1:0] b_wptr;
    always @(posedge clk) begin
        if (rst || run_start) a_wptr <= {A_AW{1'b0}};
        else if (a_xfer) a_wptr <= a_wptr + 1'b1;
        if (rst || run_start) b_wptr <= {B_AW{1'b0}};
        else if (b_xfer) b_wptr <= b_wptr + 1'b1;
    end
    wire tail_run = (DATAFLOW == 0 && TIMING != 0) && (lt + 1'b1 < R_D);  // the drain's first R cycles count
    assign cycles = cyc;

    always @(posedge clk) begin
        if (rst) begin
            run_q <= 1'b0;
            drain_q <= 1'b0;
            flush_q <= 1'b0;
            done <= 1'b0;
            p_have <= 1'b0;
        end else if (en) begin
            // the drain (after the last fold) lasts PREV_W + 1 periods; lt counts them; the psum path
            // (one period behind) ends in the flush period after it, and done follows
            flush_q <= drain_q && (lt == PREV_W);
            done <= flush_q;
            if (drain_q && (lt == PREV_W)) drain_q <= 1'b0;
            if (run_start) begin
                run_q <= 1'b1;
                p_have <= 1'b0;
            end else if (fold_end) begin
                p_have <= 1'b1;
                if (last_fold) begin
                    run_q <= 1'b0;
                    drain_q <= 1'b1;
                end
            end
        end
    end

    always @(posedge clk) begin
        if (!en) begin
            // stalled: every register holds
        end else if (run_start) begin
            m_q <= cfg_m;
            n_q <= cfg_n;
            k_q <= cfg_k;
            qen_q <= cfg_qen;
            mult_q <= cfg_mult;
            shift_q <= cfg_shift;
            lt <= {DIM_W{1'b0}};
            cyc <= {CYC_W{1'b0}};
            fi <= {DIM_W{1'b0}};
            fj <= {DIM_W{1'b0}};
            a_base <= {A_AW{1'b0}};
            b_base <= {B_AW{1'b0}};
        end else if (drain_q) begin
            lt <= lt + 1'b1;
            if (tail_run) cyc <= cyc + 1'b1;  // double-buffered: the last fold's R extra cycles
        end else if (run_q) begin
            if (DATAFLOW == 0 && lt < R_D) b_base <= b_base + 1'b1;
            if (!fold_end) begin
                lt <= lt + 1'b1;
                cyc <= cyc + 1'b1;
            end else begin
                lt <= {DIM_W{1'b0}};
                if (!last_fold || (DATAFLOW == 0 && TIMING != 0)) cyc <= cyc + 1'b1;
                p_fi <= fi;
                p_fj <= fj;
                if (DATAFLOW == 0) begin
                    if (!last_i) begin
                        fi <= fi + 1'b1;
                        a_base <= a_next[A_AW-1:0];
                    end else begin
                        fi <= {DIM_W{1'b0}};
                        a_base <= {A_AW{1'b0}};
                        fj <= fj + 1'b1;
                    end
                end else begin
                    if (!last_j) begin
                        fj <= fj + 1'b1;
                        b_base <= b_next[B_AW-1:0];
                    end else begin
                        fj <= {DIM_W{1'b0}};
                        b_base <= {B_AW{1'b0}};
                        fi <= fi + 1'b1;
                        a_base <= a_next[A_AW-1:0];
                    end
                end
            end
        end
    end

    // ---------------- double buffering (ws): the weight bank of the fold, the previous fold's A base ----
    // the bank the current fold loads and computes with (fold index % 2); os reads it nowhere
    /* verilator lint_off UNUSEDSIGNAL */
    wire             bank;
    /* verilator lint_on UNUSEDSIGNAL */
    // the previous fold's A base (its last activation may enter at local 0); os reads it nowhere
    /* verilator lint_off UNUSEDSIGNAL */
    wire [A_AW-1:0]  pa_base;
    /* verilator lint_on UNUSEDSIGNAL */
    // the fold before the previous one (its psum arrives at local 0; ws double-buffered, C = 1 only)
    wire             sel_prev2;
    wire             pp_have;
    wire [DIM_W-1:0] pp_fi, pp_fj;
    generate
        if (DATAFLOW == 0 && TIMING != 0) begin : g_dbuf
            reg             bank_q;
            reg [A_AW-1:0]  pa_q;
            always @(posedge clk) begin
                if (run_start) bank_q <= 1'b0;
                else if (en && fold_end) bank_q <= ~bank_q;
                if (en && fold_end) pa_q <= a_base;
            end
            assign bank = bank_q;
            assign pa_base = pa_q;
        end else begin : g_no_dbuf
            assign bank = 1'b0;
            assign pa_base = {A_AW{1'b0}};
        end
        // ws double-buffered with C = 1 and M = 1: T = R, a fold's psum arrives (one period behind
        // the controller) at its local 2R = local 0 two folds later, so the psum path needs the fold
        // before the previous one as well (pp_*); with C > 1 or M > 1 (T > R) it never does
        if (DATAFLOW == 0 && TIMING != 0 && COLS == 1) begin : g_prev2
            reg             pp_have_q;
            reg [DIM_W-1:0] pp_fi_q, pp_fj_q;
            always @(posedge clk) begin
                if (rst) pp_have_q <= 1'b0;
                else if (en && run_start) pp_have_q <= 1'b0;
                else if (en && fold_end) pp_have_q <= p_have;
                if (en && fold_end) begin
                    pp_fi_q <= p_fi;
                    pp_fj_q <= p_fj;
                end
            end
            assign sel_prev2 = (run_q || drain_q)
                               && ({{(IX_W-DIM_W){1'b0}}, lt} + {{(IX_W-DIM_W){1'b0}}, t_len} <= R_X);
            assign pp_have = pp_have_q;
            assign pp_fi = pp_fi_q;
            assign pp_fj = pp_fj_q;
        end else begin : g_no_prev2
            assign sel_prev2 = 1'b0;
            assign pp_have = 1'b0;
            assign pp_fi = {DIM_W{1'b0}};
            assign pp_fj = {DIM_W{1'b0}};
        end
    endgenerate

    // ---------------- operand SRAMs and array edge feeds ----------------
    // The controller reads the buffers (a_rd / b_rd at a_raddr / b_raddr) in period p; the words are on
    // the SRAMs' rdata in period p + 1 (read latency 1) and enter the array then, together with their control
    // (load, bank, window and valid bits, os tags), which goes through one register stage (the *_d
    // registers, one more stage of the tag and bank delay lines). A buffer is written only while idle
    // (a_xfer / b_xfer) and read only while busy (a_win / b_win need run_q or drain_q): one access per period.
    // ws: the B word read now is shifted into the weights next period (os: constant 0, unread)
    /* verilator lint_off UNUSEDSIGNAL */
    wire                    load;
    /* verilator lint_on UNUSEDSIGNAL */
    wire                    a_win;     // an A word is read now
    wire                    a_rd, b_rd;
    wire [A_AW-1:0]         a_raddr;
    wire [B_AW-1:0]         b_raddr;
    wire [ROWS*DATA_W-1:0]  a_rdata;
    wire [COLS*DATA_W-1:0]  b_rdata;
    wire [ROWS*DATA_W-1:0]  a_word;    // the A word entering the skew this period (0 outside a window)
    wire [COLS*DATA_W-1:0]  b_word;    // the B word at the array's north edge this period
    wire                    load_feed; // the array's load (ws) and load bank (ws double-buffered)
    wire                    bank_feed;
    wire [ROWS*DATA_W-1:0]  a_west;
    wire [ROWS*3-1:0]       a_tag_west;
    wire [COLS*DATA_W-1:0]  b_north;
    wire [COLS-1:0]         b_vld_north;
    // os: the A and B words' valid bits per row / column (registered with the read); ws: unused
    /* verilator lint_off UNUSEDSIGNAL */
    wire [ROWS-1:0]         a_vld_feed;
    wire [COLS-1:0]         b_vld_feed;
    /* verilator lint_on UNUSEDSIGNAL */
    // ws double-buffered: the bank of the activation read now (unread otherwise)
    /* verilator lint_off UNUSEDSIGNAL */
    wire                    a_bank;
    /* verilator lint_on UNUSEDSIGNAL */
    // b_win gates the os B stream; ws drives it (= load) but reads it nowhere
    /* verilator lint_off UNUSEDSIGNAL */
    wire                    b_win;
    /* verilator lint_on UNUSEDSIGNAL */

    genvar r, c, s;
    assign a_rd = a_win && en;  // (stalled: no read, rdata holds)
    assign b_rd = b_win && en;
`ifdef FORMAL
    // one access per period per SRAM: never a write (stream word) and a read in the same period, for
    // every state and input (yosys: read_verilog -formal -DFORMAL; sat -prove-asserts; npukit.rtl._lint)
    always @* begin
        assert (!(a_xfer && a_rd));
        assert (!(b_xfer && b_rd));
    end
`endif
    sram_sp #(.WIDTH(ROWS*DATA_W), .AW(A_AW)) u_amem (
        .clk(clk), .ce(a_xfer || a_rd), .we(a_xfer), .addr(a_xfer ? a_wptr : a_raddr), .wdata(s_a_tdata),
        .rdata(a_rdata)
    );
    sram_sp #(.WIDTH(COLS*DATA_W), .AW(B_AW)) u_bmem (
        .clk(clk), .ce(b_xfer || b_rd), .we(b_xfer), .addr(b_xfer ? b_wptr : b_raddr), .wdata(s_b_tdata),
        .rdata(b_rdata)
    );

    generate
        if (DATAFLOW == 0) begin : g_feed_ws
            // double-buffered with C = 1 (T = R + M - 1) the previous fold's last activation is
            // read at local 0 of the next fold (or of the drain): a_prev
            wire [IX_W-1:0] t_x = {{(IX_W-DIM_W){1'b0}}, t_len};
            wire [IX_W-1:0] pb_x = {{(IX_W-A_AW){1'b0}}, pa_base};
            wire a_prev = (TIMING != 0) && p_have && (run_q || drain_q) && (lt_x + t_x < R_X + m_x);
            /* verilator lint_off UNUSEDSIGNAL */
            wire [IX_W-1:0] a_rx = a_prev ? pb_x + lt_x + t_x - R_X : ab_x + lt_x - R_X;  // (cut to the address width)
            /* verilator lint_on UNUSEDSIGNAL */
            reg win_d, load_d;
            always @(posedge clk) begin
                if (rst) begin
                    win_d <= 1'b0;
                    load_d <= 1'b0;
                end else if (en) begin
                    win_d <= a_win;
                    load_d <= load;
                end
            end
            assign a_raddr = a_rx[A_AW-1:0];
            assign b_raddr = b_base;
            assign load = run_q && (lt < R_D);
            assign a_win = a_prev || (run_q && (lt >= R_D) && (lt < R_D + m_q));
            assign a_bank = a_prev ? ~bank : bank;
            assign b_win = load;
            assign a_word = win_d ? a_rdata : {ROWS*DATA_W{1'b0}};
            assign b_word = b_rdata;
            assign load_feed = load_d;
            assign a_vld_feed = {ROWS{1'b0}};
            assign b_vld_feed = {COLS{1'b0}};
            assign b_north = b_word;
            assign b_vld_north = {COLS{1'b0}};
        end else begin : g_feed_os
            /* verilator lint_off UNUSEDSIGNAL */
            wire [IX_W-1:0] a_rx = ab_x + lt_x;  // (both cut to the address width)
            wire [IX_W-1:0] b_rx = bb_x + lt_x;
            /* verilator lint_on UNUSEDSIGNAL */
            wire [ROWS-1:0] a_vld_now;  // row r of the word read now is inside A (i*R + r < M)
            wire [COLS-1:0] b_vld_now;  // column c of the word read now is inside B (j*C + c < N)
            for (r = 0; r < ROWS; r = r + 1) begin : g_av
                assign a_vld_now[r] = a_win && (ib + r < m_q);
            end
            for (c = 0; c < COLS; c = c + 1) begin : g_bv
                assign b_vld_now[c] = b_win && (nb + c < n_q);
            end
            reg             win_d;
            reg [ROWS-1:0]  a_vld_d;
            reg [COLS-1:0]  b_vld_d;
            always @(posedge clk) begin
                if (rst) begin
                    win_d <= 1'b0;
                    a_vld_d <= {ROWS{1'b0}};
                    b_vld_d <= {COLS{1'b0}};
                end else if (en) begin
                    win_d <= a_win;
                    a_vld_d <= a_vld_now;
                    b_vld_d <= b_vld_now;
                end
            end
            assign a_raddr = a_rx[A_AW-1:0];
            assign b_raddr = b_rx[B_AW-1:0];
            assign load = 1'b0;
            assign a_win = run_q && (lt < k_q);
            assign a_bank = 1'b0;
            assign b_win = a_win;
            assign a_word = win_d ? a_rdata : {ROWS*DATA_W{1'b0}};
            assign b_word = win_d ? b_rdata : {COLS*DATA_W{1'b0}};
            assign load_feed = 1'b0;
            assign a_vld_feed = a_vld_d;
            assign b_vld_feed = b_vld_d;
        end
    endgenerate

    generate
        // os: the {last, first} tag is the same for every row, so one shared delay line carries it
        // and row r taps stage r (stage 0: the SRAM's period; a per-row copy would be duplicate registers)
        if (DATAFLOW != 0) begin : g_tagline
            for (s = 0; s < ROWS; s = s + 1) begin : g_st
                reg [1:0] q;
                always @(posedge clk) begin
                    if (rst) q <= 2'b00;
                    else if (en) q <= (s == 0) ? {lt == k_q - 1'b1, lt == {DIM_W{1'b0}}} : g_tagline.g_st[(s == 0) ? 0 : s - 1].q;
                end
            end
        end
        // ws double-buffered: the weight bank of the activations, delayed like the rows' skew (stage
        // 0: the SRAM's period), and the bank the weights load into
        if (DATAFLOW == 0 && TIMING != 0) begin : g_bankline
            for (s = 0; s < ROWS; s = s + 1) begin : g_st
                reg q;
                always @(posedge clk) begin
                    if (rst) q <= 1'b0;
                    else if (en) q <= (s == 0) ? a_bank : g_bankline.g_st[(s == 0) ? 0 : s - 1].q;
                end
            end
            reg ld_bank_d;
            always @(posedge clk) begin
                if (en) ld_bank_d <= bank;
            end
            assign bank_feed = ld_bank_d;
        end else begin : g_no_bankline
            assign bank_feed = 1'b0;
        end
        // row skew: lane r of the A word reaches row r after r cycles
        for (r = 0; r < ROWS; r = r + 1) begin : g_askew
            wire [AS_W-1:0] lane_in;
            wire [AS_W-1:0] lane_out;
            if (DATAFLOW == 0 && TIMING == 0) begin : g_ws_lane
                assign lane_in = a_word[r*DATA_W +: DATA_W];
                assign a_tag_west[r*3 +: 3] = 3'b000;
            end else if (DATAFLOW == 0) begin : g_ws_db_lane
                // the activation's weight bank travels with it (the bank of the fold it belongs to);
                // the bank is the same for every row, so one shared delay line carries it (g_bankline)
                assign lane_in = a_word[r*DATA_W +: DATA_W];
                assign a_tag_west[r*3 +: 3] = {2'b00, g_bankline.g_st[r].q};
            end else begin : g_os_lane
                // tag {last, first, valid}; rows past M stay invalid (no output)
                assign lane_in = {a_vld_feed[r], a_word[r*DATA_W +: DATA_W]};
                assign a_tag_west[r*3 +: 3] = {g_tagline.g_st[r].q, lane_out[DATA_W]};
            end
            // r stages of AS_W-bit registers (fixed-width regs: every tool resolves their size; no
            // generate-if per stage: Icarus elaborates those in more than linear time)
            for (s = 0; s < r; s = s + 1) begin : g_st
                reg [AS_W-1:0] q;
                always @(posedge clk) begin
                    if (rst) q <= {AS_W{1'b0}};
                    else if (en) q <= (s == 0) ? lane_in : g_askew[r].g_st[(s == 0) ? 0 : s - 1].q;
                end
            end
            if (r == 0) begin : g_direct
                assign lane_out = lane_in;
            end else begin : g_delay
                assign lane_out = g_askew[r].g_st[r-1].q;
            end
            assign a_west[r*DATA_W +: DATA_W] = lane_out[DATA_W-1:0];
        end
        // column skew (os only): lane c of the B word reaches column c after c cycles
        if (DATAFLOW != 0) begin : g_bskew
            for (c = 0; c < COLS; c = c + 1) begin : g_col
                wire [BS_W-1:0] lane_in = {b_vld_feed[c], b_word[c*DATA_W +: DATA_W]};
                wire [BS_W-1:0] lane_out;
                for (s = 0; s < c; s = s + 1) begin : g_st
                    reg [BS_W-1:0] q;
                    always @(posedge clk) begin
                        if (rst) q <= {BS_W{1'b0}};
                        else if (en) q <= (s == 0) ? lane_in : g_bskew.g_col[c].g_st[(s == 0) ? 0 : s - 1].q;
                    end
                end
                if (c == 0) begin : g_direct
                    assign lane_out = lane_in;
                end else begin : g_delay
                    assign lane_out = g_bskew.g_col[c].g_st[c-1].q;
                end
                assign b_north[c*DATA_W +: DATA_W] = lane_out[DATA_W-1:0];
                assign b_vld_north[c] = lane_out[DATA_W];
            end
        end
    endgenerate

    // ---------------- array ----------------
    wire [COLS*PSUM_W-1:0] col_psum;
    // col_fin: the os drain's valid bits (ws knows its leave cycles and leaves them unread)
    /* verilator lint_off UNUSEDSIGNAL */
    wire [COLS-1:0]        col_fin;
    /* verilator lint_on UNUSEDSIGNAL */

    systolic_array #(
        .ROWS(ROWS), .COLS(COLS), .DATA_W(DATA_W), .PSUM_W(PSUM_W), .DATAFLOW(DATAFLOW), .OVERFLOW(OVERFLOW),
        .TIMING(TIMING)
    ) u_array (
        .clk(clk),
        .rst(rst),
        .en(en),
        .load(load_feed),
        .load_bank(bank_feed),
        .a_west(a_west),
        .a_tag_west(a_tag_west),
        .b_north(b_north),
        .b_vld_north(b_vld_north),
        .col_psum(col_psum),
        .col_fin(col_fin)
    );

    // ---------------- psum path: quantizer + accumulator per column ----------------
    // psums visible in local cycles [0, PREV_W] belong to the previous fold (arrivals of a fold
    // span local [lo, T + PREV_W], lo >= PREV_W + 1: ws 2R, os K + DRAIN_LAT). The array runs one
    // period behind the controller (the SRAM read), so the psum path uses the controller's fold
    // attribution of the previous period: lt_eff, fi_eff, fj_eff and live are registered once.
    wire             sel_prev = drain_q || (run_q && (lt <= PREV_W));
    reg  [DIM_W-1:0] lt_eff, fi_eff, fj_eff;
    reg              live;
    always @(posedge clk) begin
        if (rst) live <= 1'b0;
        else if (en) live <= sel_prev2 ? pp_have : sel_prev ? p_have : run_q;
        if (en) begin
            lt_eff <= sel_prev2 ? lt + t_len + t_len : sel_prev ? lt + t_len : lt;
            fi_eff <= sel_prev2 ? pp_fi : sel_prev ? p_fi : fi;
            fj_eff <= sel_prev2 ? pp_fj : sel_prev ? p_fj : fj;
        end
    end
    wire [IX_W-1:0]  lte_x = {{(IX_W-DIM_W){1'b0}}, lt_eff};
    wire [IX_W-1:0]  ib_eff = {{(IX_W-DIM_W){1'b0}}, fi_eff} * R_X;
    // (the column base: ws only; os outputs carry the fold index instead)
    /* verilator lint_off UNUSEDSIGNAL */
    wire [IX_W-1:0]  nb_eff = {{(IX_W-DIM_W){1'b0}}, fj_eff} * C_X;
    /* verilator lint_on UNUSEDSIGNAL */
    wire             acc_first = (DATAFLOW == 0) ? (ib_eff == {IX_W{1'b0}}) : 1'b1;
    wire             acc_last = (DATAFLOW == 0) ? (ib_eff + R_X >= k_x) : 1'b1;

    generate
        for (c = 0; c < COLS; c = c + 1) begin : g_out
            wire             vld;
            // (ws uses row's low DIM_W bits: the upper bits of the IX_W-bit difference are unused there)
            /* verilator lint_off UNUSEDSIGNAL */
            wire [IX_W-1:0]  row;
            /* verilator lint_on UNUSEDSIGNAL */
            wire signed [Y_W-1:0] q;
            if (DATAFLOW == 0) begin : g_ws_idx
                localparam [IX_W-1:0] C_I = c;
                localparam [IX_W-1:0] LO = R_X + R_X + C_I;  // local cycle of row 0's arrival
                wire [IX_W-1:0] col = nb_eff + C_I;
                assign vld = live && (lte_x >= LO) && (lte_x < LO + m_x) && (col < n_x);
                assign row = lte_x - LO;
            end else begin : g_os_idx
                // (row < M always holds for a finished PE; the check keeps every fold-index bit in use)
                assign vld = live && col_fin[c] && (row < m_x);
                localparam [IX_W-1:0] OFF = c + DRAIN_LAT;  // row r arrives at local K + r + c + DRAIN_LAT
                assign row = ib_eff + lte_x - (k_x + OFF);
            end
            psum_quantizer #(
                .IN_W(PSUM_W), .MULT_W(MULT_W), .OUT_W(ACC_W), .SHIFT_W(SHIFT_W)
            ) u_quant (
                .en(qen_q),
                .x(col_psum[c*PSUM_W +: PSUM_W]),
                .mult(mult_q),
                .shift(shift_q),
                .y(q)
            );
            // os: no K-folds; with ACC_W = OUT_W = Y_W the bypass register passes q unchanged
            accumulator #(
                .IN_W(Y_W), .ACC_W(OUT_W), .AW(ACC_AW), .OVERFLOW(OVERFLOW), .USE_MEM(DATAFLOW == 0 ? 1 : 0)
            ) u_acc (
                .clk(clk),
                .rst(rst),
                .en(en),
                .in_vld(vld),
                .in_first(acc_first),
                .in_last(acc_last),
                .in_addr(row[ACC_AW-1:0]),
                .in_data(q),
                .out_vld(out_vld[c]),
                .out_data(out_data[c*OUT_W +: OUT_W])
            );
            // the output column is j*C + c: the fold index j is registered (a registered j*C + c
            // would hold constant bits whenever C is a power of two)
            always @(posedge clk) begin
                if (en && vld && acc_last) begin
                    out_row[c*DIM_W +: DIM_W] <= row[DIM_W-1:0];
                    out_fold[c*DIM_W +: DIM_W] <= fj_eff;
                end
            end
        end
    endgenerate
endmodule

`timescale 1ns/1ps
// npu_top: streams one tiled GEMM out = A (M x K) @ B (K x N) through systolic_array,
// psum_quantizer and accumulator with the fold order and timing of the cycle contract
// (timing = scalesim), plain Verilog-2005.
//
// Operand buffers (written through a_we/b_we before start; asynchronous read):
//   ws: amem[i*M + m]         lane r = A[m, i*R + r]          (K-fold i, row m)
//       bmem[(j*kf + i)*R + t] lane c = B[i*R + R-1-t, j*C + c] (column fold j, K-fold i; tile rows
//                              in load order: row R-1 first)
//   os: amem[i*K + k]         lane r = A[i*R + r, k]          (row fold i)
//       bmem[j*K + k]         lane c = B[k, j*C + c]          (column fold j)
//   Lanes outside the matrices must be written as zeros.
// Run: start (sampled at a rising edge in idle) captures cfg_* and begins contract cycle 0 in the
// clock period that starts at that edge. Fold f occupies periods [f*T, (f+1)*T):
//   ws: T = 2R + C + M - 2, folds j outer, i inner; local [0, R): weights shift in (row R-1-t at t);
//       A[m, i*R + r] enters row r at local R + m + r; psum (m, c) leaves at local 2R - 1 + m + c.
//   os: T = R + C + K - 2, folds i outer, j inner; A[i*R + r, k] enters row r and B[k, j*C + c]
//       enters column c at local k + r / k + c; PE(r, c) is final at local K - 1 + r + c.
// A psum leaving the array in contract cycle t is in the array's bottom register (ws) or
// OR-drain (os) in period t + 1, goes through psum_quantizer (cfg_qen, cfg_mult, cfg_shift) and
// accumulator, and a final output is on out_* in period t + 2 (OUT_LAT = 2), one lane per column:
// out_vld[c], out_row[c] (the output's row), out_fold[c] (its column fold j: column j*COLS + c),
// out_data[c] (OUT_W bits: ws the B-bit accumulator; os max(P, B) bits, the final P-bit value or,
// with cfg_qen, its quantized B-bit value). `cycles` = index of the last run cycle = F*T - 1
// (SCALE-Sim's count); `done` is high for the one period cycles + 2.
// The is dataflow runs on this ws hardware with A' = B^T, B' = A^T (it then emits out^T).
// DATAFLOW: 0 = weight stationary, 1 = output stationary. OVERFLOW: 0 = saturate, 1 = wrap.
// DIM_W must hold max(M, N, K) + max(R, C) and T; the buffers hold 2**A_AW, 2**B_AW words and the
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
    input  wire                      a_we,
    input  wire [A_AW-1:0]           a_waddr,
    input  wire [ROWS*DATA_W-1:0]    a_wdata,
    input  wire                      b_we,
    input  wire [B_AW-1:0]           b_waddr,
    input  wire [COLS*DATA_W-1:0]    b_wdata,
    input  wire [DIM_W-1:0]          cfg_m,
    input  wire [DIM_W-1:0]          cfg_n,
    input  wire [DIM_W-1:0]          cfg_k,
    input  wire                      cfg_qen,
    input  wire [MULT_W-1:0]         cfg_mult,
    input  wire [SHIFT_W-1:0]        cfg_shift,
    input  wire                      start,
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

    // ---------------- operand buffers ----------------
    reg [ROWS*DATA_W-1:0] amem [0:(1<<A_AW)-1];
    reg [COLS*DATA_W-1:0] bmem [0:(1<<B_AW)-1];
    always @(posedge clk) begin
        if (a_we) amem[a_waddr] <= a_wdata;
        if (b_we) bmem[b_waddr] <= b_wdata;
    end

    // ---------------- controller ----------------
    reg [DIM_W-1:0]  m_q, n_q, k_q;
    reg              qen_q;
    reg [MULT_W-1:0] mult_q;
    reg [SHIFT_W-1:0] shift_q;
    reg              run_q, drain_q;
    reg [DIM_W-1:0]  lt;          // local cycle within the fold
    reg [CYC_W-1:0]  cyc;         // absolute contract cycle
    // fold indices are counters (not i*R / j*C bases) so that no register bit is constant
    reg [DIM_W-1:0]  fi;          // spatial-row fold i: K-fold (ws) or row fold (os)
    reg [DIM_W-1:0]  fj;          // column fold j
    reg [A_AW-1:0]   a_base;      // first A word of the fold: ws i*M, os i*K
    reg [B_AW-1:0]   b_base;      // ws: weight read pointer (+1 per load cycle), os: j*K
    reg [DIM_W-1:0]  p_fi, p_fj;  // the previous fold (its last psums arrive at local 0)
    reg              p_have;
    wire [IX_W-1:0]  ib = fi * ROWS;
    wire [IX_W-1:0]  nb = fj * COLS;

    // T, the fold length (not a register: T's low bits would duplicate m_q's / k_q's)
    wire [DIM_W-1:0] t_len = (DATAFLOW == 0) ? (2 * ROWS + COLS - 2) + m_q : (ROWS + COLS - 2) + k_q;
    wire fold_end = run_q && (lt == t_len - 1'b1);
    wire last_i   = (DATAFLOW == 0) ? (ib + ROWS >= k_q) : (ib + ROWS >= m_q);
    wire last_j   = (nb + COLS >= n_q);
    wire last_fold = last_i && last_j;

    assign busy = run_q | drain_q;
    assign cycles = cyc;

    always @(posedge clk) begin
        if (rst) begin
            run_q <= 1'b0;
            drain_q <= 1'b0;
            done <= 1'b0;
            p_have <= 1'b0;
        end else begin
            done <= drain_q;
            if (drain_q) drain_q <= 1'b0;
            if (!run_q && !drain_q && start) begin
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
        if (!run_q && !drain_q && start) begin
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
        end else if (run_q) begin
            if (DATAFLOW == 0 && lt < ROWS) b_base <= b_base + 1'b1;
            if (!fold_end) begin
                lt <= lt + 1'b1;
                cyc <= cyc + 1'b1;
            end else begin
                lt <= {DIM_W{1'b0}};
                if (!last_fold) cyc <= cyc + 1'b1;
                p_fi <= fi;
                p_fj <= fj;
                if (DATAFLOW == 0) begin
                    if (!last_i) begin
                        fi <= fi + 1'b1;
                        a_base <= a_base + m_q;
                    end else begin
                        fi <= {DIM_W{1'b0}};
                        a_base <= {A_AW{1'b0}};
                        fj <= fj + 1'b1;
                    end
                end else begin
                    if (!last_j) begin
                        fj <= fj + 1'b1;
                        b_base <= b_base + k_q;
                    end else begin
                        fj <= {DIM_W{1'b0}};
                        b_base <= {B_AW{1'b0}};
                        fi <= fi + 1'b1;
                        a_base <= a_base + k_q;
                    end
                end
            end
        end
    end

    // ---------------- array edge feeds ----------------
    wire                    load;
    wire [ROWS*DATA_W-1:0]  a_word;
    wire [COLS*DATA_W-1:0]  b_word;
    wire [ROWS*DATA_W-1:0]  a_west;
    wire [ROWS*3-1:0]       a_tag_west;
    wire [COLS*DATA_W-1:0]  b_north;
    wire [COLS-1:0]         b_vld_north;
    wire                    a_win;
    wire                    b_win;

    generate
        if (DATAFLOW == 0) begin : g_feed_ws
            // (gated so that no tool folds the pointer register into a synchronous read port)
            wire [B_AW-1:0] w_raddr = load ? b_base : {B_AW{1'b0}};
            wire [A_AW-1:0] a_raddr = a_base + lt - ROWS;
            assign load = run_q && (lt < ROWS);
            assign a_win = run_q && (lt >= ROWS) && (lt < ROWS + m_q);
            assign b_win = load;
            assign a_word = a_win ? amem[a_raddr] : {ROWS*DATA_W{1'b0}};
            assign b_word = bmem[w_raddr];
            assign b_north = b_word;
            assign b_vld_north = {COLS{1'b0}};
        end else begin : g_feed_os
            wire [A_AW-1:0] a_raddr = a_base + lt;
            wire [B_AW-1:0] b_raddr = b_base + lt;
            assign load = 1'b0;
            assign a_win = run_q && (lt < k_q);
            assign b_win = a_win;
            assign a_word = a_win ? amem[a_raddr] : {ROWS*DATA_W{1'b0}};
            assign b_word = b_win ? bmem[b_raddr] : {COLS*DATA_W{1'b0}};
        end
    endgenerate

    genvar r, c, s;
    generate
        // os: the {last, first} tag is the same for every row, so one shared delay line carries it
        // and row r taps stage r (a per-row copy would be duplicate registers)
        if (DATAFLOW != 0 && ROWS > 1) begin : g_tagline
            for (s = 0; s < ROWS - 1; s = s + 1) begin : g_st
                reg [1:0] q;
                always @(posedge clk) begin
                    if (rst) q <= 2'b00;
                    else q <= (s == 0) ? {lt == k_q - 1'b1, lt == {DIM_W{1'b0}}} : g_tagline.g_st[(s == 0) ? 0 : s - 1].q;
                end
            end
        end
        // row skew: lane r of the A word reaches row r after r cycles
        for (r = 0; r < ROWS; r = r + 1) begin : g_askew
            wire [AS_W-1:0] lane_in;
            wire [AS_W-1:0] lane_out;
            if (DATAFLOW == 0) begin : g_ws_lane
                assign lane_in = a_word[r*DATA_W +: DATA_W];
                assign a_tag_west[r*3 +: 3] = 3'b000;
            end else begin : g_os_lane
                // tag {last, first, valid}; rows past M stay invalid (no output)
                wire [1:0] last_first;
                assign lane_in = {a_win && (ib + r < m_q), a_word[r*DATA_W +: DATA_W]};
                if (r == 0) begin : g_tag0
                    assign last_first = {lt == k_q - 1'b1, lt == {DIM_W{1'b0}}};
                end else begin : g_tagr
                    assign last_first = g_tagline.g_st[r-1].q;
                end
                assign a_tag_west[r*3 +: 3] = {last_first, lane_out[DATA_W]};
            end
            // r stages of AS_W-bit registers (fixed-width regs: every tool resolves their size; no
            // generate-if per stage: Icarus elaborates those in more than linear time)
            for (s = 0; s < r; s = s + 1) begin : g_st
                reg [AS_W-1:0] q;
                always @(posedge clk) begin
                    if (rst) q <= {AS_W{1'b0}};
                    else q <= (s == 0) ? lane_in : g_askew[r].g_st[(s == 0) ? 0 : s - 1].q;
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
                wire [BS_W-1:0] lane_in = {b_win && (nb + c < n_q), b_word[c*DATA_W +: DATA_W]};
                wire [BS_W-1:0] lane_out;
                for (s = 0; s < c; s = s + 1) begin : g_st
                    reg [BS_W-1:0] q;
                    always @(posedge clk) begin
                        if (rst) q <= {BS_W{1'b0}};
                        else q <= (s == 0) ? lane_in : g_bskew.g_col[c].g_st[(s == 0) ? 0 : s - 1].q;
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
    wire [COLS-1:0]        col_fin;

    systolic_array #(
        .ROWS(ROWS), .COLS(COLS), .DATA_W(DATA_W), .PSUM_W(PSUM_W), .DATAFLOW(DATAFLOW), .OVERFLOW(OVERFLOW)
    ) u_array (
        .clk(clk),
        .rst(rst),
        .load(load),
        .a_west(a_west),
        .a_tag_west(a_tag_west),
        .b_north(b_north),
        .b_vld_north(b_vld_north),
        .col_psum(col_psum),
        .col_fin(col_fin)
    );

    // ---------------- psum path: quantizer + accumulator per column ----------------
    // psums visible in local cycle 0 belong to the previous fold (arrivals span local [lo, T], lo >= 1)
    wire             sel_prev = drain_q || (run_q && (lt == {DIM_W{1'b0}}));
    wire [DIM_W-1:0] lt_eff = sel_prev ? t_len : lt;
    wire [DIM_W-1:0] fi_eff = sel_prev ? p_fi : fi;
    wire [DIM_W-1:0] fj_eff = sel_prev ? p_fj : fj;
    wire [IX_W-1:0]  ib_eff = fi_eff * ROWS;
    wire [IX_W-1:0]  nb_eff = fj_eff * COLS;
    wire             live = sel_prev ? p_have : run_q;
    wire             acc_first = (DATAFLOW == 0) ? (ib_eff == {IX_W{1'b0}}) : 1'b1;
    wire             acc_last = (DATAFLOW == 0) ? (ib_eff + ROWS >= k_q) : 1'b1;

    generate
        for (c = 0; c < COLS; c = c + 1) begin : g_out
            wire             vld;
            wire [IX_W-1:0]  row;
            wire [IX_W-1:0]  col = nb_eff + c;
            wire signed [Y_W-1:0] q;
            if (DATAFLOW == 0) begin : g_ws_idx
                assign vld = live && (lt_eff >= 2 * ROWS + c) && (lt_eff < 2 * ROWS + c + m_q) && (col < n_q);
                assign row = lt_eff - (2 * ROWS + c);
            end else begin : g_os_idx
                // (row < M always holds for a finished PE; the check keeps every fold-index bit in use)
                assign vld = live && col_fin[c] && (row < m_q);
                assign row = ib_eff + lt_eff - (k_q + c);
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
                if (vld && acc_last) begin
                    out_row[c*DIM_W +: DIM_W] <= row[DIM_W-1:0];
                    out_fold[c*DIM_W +: DIM_W] <= fj_eff;
                end
            end
        end
    endgenerate
endmodule

`timescale 1ns/1ps
// systolic_array: ROWS x COLS grid of pe (plain Verilog-2005, generate-based).
//
// Edges (packed 1-D buses, lane i = [i*W +: W]):
//   a_west[r]    operand entering row r at column 0 (moves one column right per cycle),
//   a_tag_west[r] its os tag {last, first, valid} (ws: bit 0 = the weight bank when double-buffered),
//   b_north[c]   ws: weight shifted into column c while `load` is high; os: B operand entering column c,
//   b_vld_north[c] os: B operand valid (ignored by ws).
// Outputs, one lane per column:
//   ws: col_psum[c] = psum register of PE(ROWS-1, c) (the column's psum leaving the array),
//       col_fin = 0 (the controller knows the ws leave cycles);
//   os: col_psum[c] = the psum of the one PE of column c that finished DRAIN_LAT + 1 cycles earlier,
//       col_fin[c] = some PE of column c did. The drain is a registered binary mux tree per column:
//       level 0 = the PEs (fin, psum), level l node i = register of (left fin ? left psum : right
//       psum, left fin | right fin) over nodes 2i and 2i + 1 of level l - 1. At most one PE of a
//       column finishes per cycle (PE(r, c) at local K - 1 + r + c), so a mux per level loses
//       nothing; every PE reaches the root in DRAIN_LAT = ceil(log2(ROWS)) cycles, the same for
//       every row, and the longest combinational path is one 2:1 mux (no chain as deep as the array).
// DATAFLOW: 0 = weight stationary, 1 = output stationary. OVERFLOW: 0 = saturate, 1 = wrap.
// TIMING: 0 = scalesim, 1 = double-buffered (ws: two weight banks per PE, see pe; load_bank names
// the bank `load` fills, a_tag_west[r*3] the bank of row r's activation).
module systolic_array #(
    parameter ROWS     = 4,
    parameter COLS     = 4,
    parameter DATA_W   = 8,
    parameter PSUM_W   = 32,
    parameter DATAFLOW = 0,
    parameter OVERFLOW = 0,
    parameter TIMING   = 0
) (
    input  wire                        clk,
    input  wire                        rst,
    input  wire                        en,   // clock enable of every register (0: stall)
    input  wire                        load,
    input  wire                        load_bank,
    input  wire [ROWS*DATA_W-1:0]      a_west,
    input  wire [ROWS*3-1:0]           a_tag_west,
    input  wire [COLS*DATA_W-1:0]      b_north,
    input  wire [COLS-1:0]             b_vld_north,
    output wire [COLS*PSUM_W-1:0]      col_psum,
    output wire [COLS-1:0]             col_fin
);
    // DRAIN_LAT = ceil(log2(ROWS)) (a conditional chain, not $clog2: every tool here, pyverilog
    // included, evaluates it; ROWS <= 16384 = the largest array npukit.rtl builds)
    localparam DRAIN_LAT = (ROWS <= 1) ? 0 : (ROWS <= 2) ? 1 : (ROWS <= 4) ? 2 : (ROWS <= 8) ? 3
                         : (ROWS <= 16) ? 4 : (ROWS <= 32) ? 5 : (ROWS <= 64) ? 6 : (ROWS <= 128) ? 7
                         : (ROWS <= 256) ? 8 : (ROWS <= 512) ? 9 : (ROWS <= 1024) ? 10 : (ROWS <= 2048) ? 11
                         : (ROWS <= 4096) ? 12 : (ROWS <= 8192) ? 13 : 14;

    // Internal nets are arrays of nets, one word per PE edge: a_h[r*(COLS+1)+c] enters PE(r, c)
    // from the left (c = COLS: the east edge); b_v/bv_v/p_v/d_v/f_v[r*COLS+c] enter PE(r, c) from
    // above (r = ROWS: the south edge). One net per word keeps Icarus fast (no array-wide vector
    // is re-evaluated on every change) and the loops need no generate-if (whose elaboration grows
    // faster than linearly in Icarus).
    wire [DATA_W-1:0] a_h  [0:ROWS*(COLS+1)-1];
    wire [2:0]        t_h  [0:ROWS*(COLS+1)-1];
    wire [DATA_W-1:0] b_v  [0:(ROWS+1)*COLS-1];
    wire              bv_v [0:(ROWS+1)*COLS-1];
    wire [PSUM_W-1:0] p_v  [0:(ROWS+1)*COLS-1];   // ws: psum moving down; p_v[(r+1)*COLS+c] = PE(r, c)'s psum
    // fin: the PEs' os finish flags (constant 0 and unread for ws)
    /* verilator lint_off UNUSEDSIGNAL */
    wire              fin  [0:ROWS*COLS-1];
    /* verilator lint_on UNUSEDSIGNAL */

    genvar r, c;
    generate
        for (r = 0; r < ROWS; r = r + 1) begin : g_west
            assign a_h[r*(COLS+1)] = a_west[r*DATA_W +: DATA_W];
            assign t_h[r*(COLS+1)] = a_tag_west[r*3 +: 3];
        end
        for (c = 0; c < COLS; c = c + 1) begin : g_edge
            assign b_v[c] = b_north[c*DATA_W +: DATA_W];
            assign bv_v[c] = b_vld_north[c];
            assign p_v[c] = {PSUM_W{1'b0}};
        end
        for (r = 0; r < ROWS; r = r + 1) begin : g_row
            for (c = 0; c < COLS; c = c + 1) begin : g_col
                pe #(
                    .DATA_W(DATA_W), .PSUM_W(PSUM_W), .DATAFLOW(DATAFLOW), .OVERFLOW(OVERFLOW), .TIMING(TIMING)
                ) u_pe (
                    .clk(clk),
                    .rst(rst),
                    .en(en),
                    .load(load),
                    .load_bank(load_bank),
                    .a_in(a_h[r*(COLS+1)+c]),
                    .a_tag_in(t_h[r*(COLS+1)+c]),
                    .b_in(b_v[r*COLS+c]),
                    .b_vld_in(bv_v[r*COLS+c]),
                    .psum_in(p_v[r*COLS+c]),
                    .a_out(a_h[r*(COLS+1)+c+1]),
                    .a_tag_out(t_h[r*(COLS+1)+c+1]),
                    .b_out(b_v[(r+1)*COLS+c]),
                    .b_vld_out(bv_v[(r+1)*COLS+c]),
                    .psum_out(p_v[(r+1)*COLS+c]),
                    .fin_out(fin[r*COLS+c])
                );
            end
        end
        if (DATAFLOW == 0) begin : g_ws_out
            for (c = 0; c < COLS; c = c + 1) begin : g_col
                assign col_psum[c*PSUM_W +: PSUM_W] = p_v[ROWS*COLS+c];
                assign col_fin[c] = 1'b0;
            end
        end else begin : g_drain
            // tv/tf[(l*ROWS + i)*COLS + c]: node i of level l of column c's tree; level l has
            // ((ROWS - 1) >> l) + 1 nodes (an odd last node takes its left child only)
            wire [PSUM_W-1:0] tv [0:(DRAIN_LAT+1)*ROWS*COLS-1];
            wire              tf [0:(DRAIN_LAT+1)*ROWS*COLS-1];
            genvar l, i;
            for (r = 0; r < ROWS; r = r + 1) begin : g_leaf
                for (c = 0; c < COLS; c = c + 1) begin : g_col
                    assign tv[r*COLS+c] = p_v[(r+1)*COLS+c];
                    assign tf[r*COLS+c] = fin[r*COLS+c];
                end
            end
            for (l = 1; l <= DRAIN_LAT; l = l + 1) begin : g_lvl
                for (i = 0; i <= ((ROWS - 1) >> l); i = i + 1) begin : g_node
                    for (c = 0; c < COLS; c = c + 1) begin : g_col
                        // the right child exists unless i is the odd last node of level l - 1
                        localparam integer LI = ((l - 1) * ROWS + 2 * i) * COLS + c;
                        localparam integer RI = (2 * i + 1 <= ((ROWS - 1) >> (l - 1))) ? LI + COLS : LI;
                        reg [PSUM_W-1:0] q;
                        reg              f;
                        always @(posedge clk) begin
                            if (en) q <= tf[LI] ? tv[LI] : tv[RI];
                            if (rst) f <= 1'b0;
                            else if (en) f <= tf[LI] | tf[RI];
                        end
                        assign tv[(l*ROWS+i)*COLS+c] = q;
                        assign tf[(l*ROWS+i)*COLS+c] = f;
                    end
                end
            end
            for (c = 0; c < COLS; c = c + 1) begin : g_col
                assign col_psum[c*PSUM_W +: PSUM_W] = tv[(DRAIN_LAT*ROWS)*COLS+c];
                assign col_fin[c] = tf[(DRAIN_LAT*ROWS)*COLS+c];
            end
        end
    endgenerate
endmodule

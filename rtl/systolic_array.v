`timescale 1ns/1ps
// systolic_array: ROWS x COLS grid of pe (plain Verilog-2005, generate-based).
//
// Edges (packed 1-D buses, lane i = [i*W +: W]):
//   a_west[r]    operand entering row r at column 0 (moves one column right per cycle),
//   a_tag_west[r] its os tag {last, first, valid} (ignored by ws),
//   b_north[c]   ws: weight shifted into column c while `load` is high; os: B operand entering column c,
//   b_vld_north[c] os: B operand valid (ignored by ws).
// Outputs, one lane per column:
//   ws: col_psum[c] = psum register of PE(ROWS-1, c) (the column's psum leaving the array),
//       col_fin = 0 (the controller knows the ws leave cycles);
//   os: col_psum[c] = the psum of the one PE of column c that finished in the previous cycle
//       (an OR over the column of fin ? acc : 0; at most one PE of a column finishes per cycle),
//       col_fin[c] = some PE of column c finished.
// DATAFLOW: 0 = weight stationary, 1 = output stationary. OVERFLOW: 0 = saturate, 1 = wrap.
module systolic_array #(
    parameter ROWS     = 4,
    parameter COLS     = 4,
    parameter DATA_W   = 8,
    parameter PSUM_W   = 32,
    parameter DATAFLOW = 0,
    parameter OVERFLOW = 0
) (
    input  wire                        clk,
    input  wire                        rst,
    input  wire                        load,
    input  wire [ROWS*DATA_W-1:0]      a_west,
    input  wire [ROWS*3-1:0]           a_tag_west,
    input  wire [COLS*DATA_W-1:0]      b_north,
    input  wire [COLS-1:0]             b_vld_north,
    output wire [COLS*PSUM_W-1:0]      col_psum,
    output wire [COLS-1:0]             col_fin
);
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
    wire [PSUM_W-1:0] d_v  [0:(ROWS+1)*COLS-1];   // os drain: OR over rows < r of (fin ? acc : 0)
    wire              f_v  [0:(ROWS+1)*COLS-1];   // os drain: some row < r finished
    wire              fin  [0:ROWS*COLS-1];

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
            assign d_v[c] = {PSUM_W{1'b0}};
            assign f_v[c] = 1'b0;
            assign col_psum[c*PSUM_W +: PSUM_W] = (DATAFLOW == 0) ? p_v[ROWS*COLS+c] : d_v[ROWS*COLS+c];
            assign col_fin[c] = (DATAFLOW == 0) ? 1'b0 : f_v[ROWS*COLS+c];
        end
        for (r = 0; r < ROWS; r = r + 1) begin : g_row
            for (c = 0; c < COLS; c = c + 1) begin : g_col
                pe #(
                    .DATA_W(DATA_W), .PSUM_W(PSUM_W), .DATAFLOW(DATAFLOW), .OVERFLOW(OVERFLOW)
                ) u_pe (
                    .clk(clk),
                    .rst(rst),
                    .load(load),
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
                // os: OR-drain of finished accumulators down the column (constant 0 for ws)
                assign d_v[(r+1)*COLS+c] = (DATAFLOW == 0) ? {PSUM_W{1'b0}}
                    : (d_v[r*COLS+c] | (p_v[(r+1)*COLS+c] & {PSUM_W{fin[r*COLS+c]}}));
                assign f_v[(r+1)*COLS+c] = (DATAFLOW == 0) ? 1'b0 : (f_v[r*COLS+c] | fin[r*COLS+c]);
            end
        end
    endgenerate
endmodule

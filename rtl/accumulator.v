`timescale 1ns/1ps
// accumulator: one column's psum buffer (plain Verilog-2005).
//
// Accumulates the (quantized) K-fold partial sums of one array column at ACC_W bits (B):
//   first K-fold: acc[addr] <= ovf_B(in);   later K-folds: acc[addr] <= ovf_B(acc[addr] + in),
// ovf_B saturating (OVERFLOW = 0) or wrapping (OVERFLOW = 1) to ACC_W bits (two's complement).
// On the last K-fold the new value is also registered to the output (out_vld for one cycle).
// The buffer holds 2**AW entries of ACC_W bits (AW = row-index width). USE_MEM = 0 builds no
// buffer (output stationary has no K-folds): out <= ovf_B(in) on every valid input.
// Latency: one cycle (in_vld in cycle t -> out_vld in cycle t + 1).
module accumulator #(
    parameter IN_W     = 32,
    parameter ACC_W    = 32,
    parameter AW       = 6,
    parameter OVERFLOW = 0,
    parameter USE_MEM  = 1
) (
    input  wire                    clk,
    input  wire                    rst,
    input  wire                    en,       // clock enable (0: stall, every register holds)
    input  wire                    in_vld,
    // USE_MEM = 0 (os) has no K-folds and no buffer: it reads neither in_first, in_last nor in_addr
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire                    in_first,
    input  wire                    in_last,
    input  wire [AW-1:0]           in_addr,
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire signed [IN_W-1:0]  in_data,
    output reg                     out_vld,
    output reg signed [ACC_W-1:0]  out_data
);
    localparam SUM_W = ((IN_W > ACC_W) ? IN_W : ACC_W) + 1;

    wire signed [ACC_W-1:0] old;
    // wrap (OVERFLOW = 1) keeps the low ACC_W bits of the sum: its carry bit is unread by design
    /* verilator lint_off UNUSEDSIGNAL */
    wire signed [SUM_W-1:0] sum;
    /* verilator lint_on UNUSEDSIGNAL */
    wire signed [ACC_W-1:0] nxt;
    wire                    emit;

    // both operands sign-extended to SUM_W bits explicitly (SUM_W exceeds both widths)
    wire signed [SUM_W-1:0] old_x = {{(SUM_W-ACC_W){old[ACC_W-1]}}, old};
    wire signed [SUM_W-1:0] in_x  = {{(SUM_W-IN_W){in_data[IN_W-1]}}, in_data};
    assign sum = old_x + in_x;

    generate
        if (OVERFLOW == 0) begin : g_sat
            wire hi_ok = (sum[SUM_W-1:ACC_W-1] == {(SUM_W-ACC_W+1){sum[SUM_W-1]}});
            assign nxt = hi_ok ? sum[ACC_W-1:0]
                       : (sum[SUM_W-1] ? {1'b1, {(ACC_W-1){1'b0}}} : {1'b0, {(ACC_W-1){1'b1}}});
        end else begin : g_wrap
            assign nxt = sum[ACC_W-1:0];
        end

        if (USE_MEM != 0) begin : g_mem
            reg signed [ACC_W-1:0] mem [0:(1<<AW)-1];
            assign old = in_first ? {ACC_W{1'b0}} : mem[in_addr];
            assign emit = in_vld & in_last;
            always @(posedge clk) begin
                if (en && in_vld) mem[in_addr] <= nxt;
            end
        end else begin : g_no_mem
            assign old = {ACC_W{1'b0}};
            assign emit = in_vld;
        end
    endgenerate

    always @(posedge clk) begin
        if (rst) out_vld <= 1'b0;
        else if (en) out_vld <= emit;
        if (en && emit) out_data <= nxt;
    end
endmodule

`timescale 1ns/1ps
// pe: one processing element of the systolic array (plain Verilog-2005).
//
// DATAFLOW = 0 (weight stationary, ws):
//   b_q holds the stationary weight; while `load` is high it shifts down one row per cycle
//   (b_q <= b_in, b_out = b_q). Every cycle the PE computes
//   psum_out <= ovf_P(psum_in + a_in * b_q) and forwards a_in to the right (a_out = a_q).
//   TIMING = 1 (double-buffered): two weight banks; `load` shifts the next fold's weights into bank
//   load_bank (b_out = that bank) while the activations compute with the bank named by their tag
//   bit a_tag_in[0] (the fold's bank, travelling right with the activation: a_tag_out[0]).
// DATAFLOW = 1 (output stationary, os):
//   a_in moves right with its tag {last, first, valid}, b_in moves down with b_vld;
//   when the a tag is valid the PE accumulates acc <= ovf_P((first ? 0 : acc) + a_in * b_in).
//   fin_out is high for one cycle after the last k (valid & last & b_vld): psum_out is final then.
// OVERFLOW = 0 saturates, 1 wraps every addition to PSUM_W bits (two's complement).
// Only the tag/valid bits are reset (rst, synchronous); the datapath needs no reset. en = 0 holds
// every register (npu_top's output backpressure stalls the whole array).
module pe #(
    parameter DATA_W   = 8,
    parameter PSUM_W   = 32,
    parameter DATAFLOW = 0,
    parameter OVERFLOW = 0,
    parameter TIMING   = 0
) (
    input  wire                     clk,
    input  wire                     en,        // clock enable: 0 holds every register (a stall)
    // one port list for both dataflows: ws reads neither rst, the tag nor b_vld_in (double-buffered:
    // rst and tag bit 0 only); os never reads load; only double-buffered ws reads load_bank
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire                     rst,
    input  wire                     load,
    input  wire                     load_bank,
    input  wire signed [DATA_W-1:0] a_in,
    input  wire [2:0]               a_tag_in,
    input  wire signed [DATA_W-1:0] b_in,
    input  wire                     b_vld_in,
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire signed [PSUM_W-1:0] psum_in,
    output wire signed [DATA_W-1:0] a_out,
    output wire [2:0]               a_tag_out,
    output wire signed [DATA_W-1:0] b_out,
    output wire                     b_vld_out,
    output wire signed [PSUM_W-1:0] psum_out,
    output wire                     fin_out
);
    localparam PROD_W = 2 * DATA_W;
    localparam SUM_W  = ((PSUM_W > PROD_W) ? PSUM_W : PROD_W) + 1;

    reg  signed [DATA_W-1:0] a_q;
    reg  signed [DATA_W-1:0] b_q;
    reg  signed [PSUM_W-1:0] p_q;
    wire signed [PROD_W-1:0] prod;
    wire signed [PSUM_W-1:0] addend;
    wire signed [SUM_W-1:0]  sum;
    wire signed [PSUM_W-1:0] sum_ovf;

    // ws multiplies by the stationary weight, os by the streaming b operand
    wire signed [DATA_W-1:0] w_use;  // ws: the weight this activation multiplies (its fold's bank)
    wire signed [DATA_W-1:0] b_fwd;  // ws: the weight register shifting down (the bank being loaded)
    assign prod = (DATAFLOW == 0) ? a_in * w_use : a_in * b_in;
    assign addend = (DATAFLOW == 0) ? psum_in : (a_tag_in[1] ? {PSUM_W{1'b0}} : p_q);
    // both operands sign-extended to SUM_W bits explicitly
    assign sum = {{(SUM_W-PSUM_W){addend[PSUM_W-1]}}, addend} + {{(SUM_W-PROD_W){prod[PROD_W-1]}}, prod};

    // saturate: clamp when the bits above the sign differ from it; wrap: keep the low PSUM_W bits
    wire fits = (sum[SUM_W-1:PSUM_W-1] == {(SUM_W-PSUM_W+1){sum[SUM_W-1]}});
    assign sum_ovf = (OVERFLOW != 0 || fits) ? sum[PSUM_W-1:0]
                   : (sum[SUM_W-1] ? {1'b1, {(PSUM_W-1){1'b0}}} : {1'b0, {(PSUM_W-1){1'b1}}});

    assign a_out = a_q;
    assign b_out = (DATAFLOW == 0) ? b_fwd : b_q;
    assign psum_out = p_q;

    generate
        if (DATAFLOW == 0 && TIMING == 0) begin : g_ws
            always @(posedge clk) begin
                if (en) begin
                    a_q <= a_in;
                    if (load) b_q <= b_in;
                    p_q <= sum_ovf;
                end
            end
            assign w_use = b_q;
            assign b_fwd = b_q;
            assign a_tag_out = 3'b000;
            assign b_vld_out = 1'b0;
            assign fin_out = 1'b0;
        end else if (DATAFLOW == 0) begin : g_ws_db
            reg signed [DATA_W-1:0] b1_q;  // weight bank 1 (b_q is bank 0)
            reg                     t_q;   // the bank tag of a_q
            always @(posedge clk) begin
                if (en) begin
                    a_q <= a_in;
                    if (load && !load_bank) b_q <= b_in;
                    if (load && load_bank) b1_q <= b_in;
                    p_q <= sum_ovf;
                end
                if (rst) t_q <= 1'b0;
                else if (en) t_q <= a_tag_in[0];
            end
            assign w_use = a_tag_in[0] ? b1_q : b_q;
            assign b_fwd = load_bank ? b1_q : b_q;
            assign a_tag_out = {2'b00, t_q};
            assign b_vld_out = 1'b0;
            assign fin_out = 1'b0;
        end else begin : g_os
            assign w_use = b_q;  // (unused: os multiplies the streaming b_in)
            assign b_fwd = b_q;
            reg [2:0] tag_q;
            reg       bv_q;
            reg       fin_q;
            always @(posedge clk) begin
                if (en) begin
                    a_q <= a_in;
                    b_q <= b_in;
                    if (a_tag_in[0]) p_q <= sum_ovf;
                end
                if (rst) begin
                    tag_q <= 3'b000;
                    bv_q <= 1'b0;
                    fin_q <= 1'b0;
                end else if (en) begin
                    tag_q <= a_tag_in;
                    bv_q <= b_vld_in;
                    fin_q <= a_tag_in[0] & a_tag_in[2] & b_vld_in;
                end
            end
            assign a_tag_out = tag_q;
            assign b_vld_out = bv_q;
            assign fin_out = fin_q;
        end
    endgenerate
endmodule

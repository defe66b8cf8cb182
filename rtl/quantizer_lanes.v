`timescale 1ns/1ps
// quantizer_lanes: LANES independent psum_quantizer instances side by side (verification harness:
// lets a testbench check many quantizer inputs per step). Lane i of each bus is [i*W +: W].
module quantizer_lanes #(
    parameter LANES   = 64,
    parameter IN_W    = 32,
    parameter MULT_W  = 16,
    parameter OUT_W   = 8,
    parameter SHIFT_W = 6,
    parameter Y_W     = (IN_W > OUT_W) ? IN_W : OUT_W
) (
    input  wire                      en,
    input  wire [LANES*IN_W-1:0]     x,
    input  wire [LANES*MULT_W-1:0]   mult,
    input  wire [LANES*SHIFT_W-1:0]  shift,
    output wire [LANES*Y_W-1:0]      y
);
    genvar i;
    generate
        for (i = 0; i < LANES; i = i + 1) begin : g_lane
            psum_quantizer #(
                .IN_W(IN_W), .MULT_W(MULT_W), .OUT_W(OUT_W), .SHIFT_W(SHIFT_W), .Y_W(Y_W)
            ) u_q (
                .en(en),
                .x(x[i*IN_W +: IN_W]),
                .mult(mult[i*MULT_W +: MULT_W]),
                .shift(shift[i*SHIFT_W +: SHIFT_W]),
                .y(y[i*Y_W +: Y_W])
            );
        end
    endgenerate
endmodule

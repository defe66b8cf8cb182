`timescale 1ns/1ps
// psum_quantizer: the contract's psum quantizer, combinational (plain Verilog-2005).
//
//   q(x) = sat_B( rne(x * mult, shift) )
//   x: signed IN_W-bit psum (P), mult: signed MULT_W-bit multiplier, shift: 0..2**SHIFT_W-1,
//   rne(y, 0) = y; rne(y, s) = (y >>> s) + round, round = rem > half or (rem == half and (y >>> s) odd),
//   rem = y & (2**s - 1), half = 2**(s-1) (round to nearest, ties to even);
//   sat_B clamps to [-2**(OUT_W-1), 2**(OUT_W-1) - 1].
// A shift of at least IN_W + MULT_W (the product width) always gives 0 (|y| <= 2**(s-1)).
// en = 0 makes the quantizer the identity: y = x. The output y is Y_W = max(IN_W, OUT_W) bits,
// sign-extended in both cases.
module psum_quantizer #(
    parameter IN_W    = 32,
    parameter MULT_W  = 16,
    parameter OUT_W   = 32,
    parameter SHIFT_W = 6,
    parameter Y_W     = (IN_W > OUT_W) ? IN_W : OUT_W
) (
    input  wire                     en,
    input  wire signed [IN_W-1:0]   x,
    input  wire signed [MULT_W-1:0] mult,
    input  wire [SHIFT_W-1:0]       shift,
    output wire signed [Y_W-1:0]    y
);
    localparam PW = IN_W + MULT_W;

    wire signed [PW-1:0] prod;
    wire signed [PW-1:0] shifted;
    wire [PW-1:0]        mask;
    wire [PW-1:0]        rem;
    wire [PW-1:0]        half;
    wire                 big;
    wire                 round_up;
    wire signed [PW-1:0] rne;
    wire signed [OUT_W-1:0] sat;

    assign prod = x * mult;
    assign big = ({{(32-SHIFT_W){1'b0}}, shift} >= PW);  // (shift widened to PW's 32 bits)
    assign shifted = prod >>> shift;
    assign mask = ~({PW{1'b1}} << shift);
    assign rem = prod & mask;
    assign half = (shift == 0) ? {PW{1'b0}} : ({{(PW-1){1'b0}}, 1'b1} << (shift - 1'b1));
    assign round_up = (shift != 0) && ((rem > half) || ((rem == half) && shifted[0]));
    assign rne = big ? {PW{1'b0}} : shifted + {{(PW-1){1'b0}}, round_up};

    // every width change is an explicit sign extension (Verilator -Wall clean; a zero-width
    // replication is not Verilog-2005, hence the generate-ifs)
    wire signed [Y_W-1:0] sat_y;
    wire signed [Y_W-1:0] x_y;
    generate
        if (OUT_W > PW) begin : g_no_sat_ext
            assign sat = {{(OUT_W-PW){rne[PW-1]}}, rne};
        end else if (OUT_W == PW) begin : g_no_sat
            assign sat = rne;
        end else begin : g_sat
            wire hi_ok = (rne[PW-1:OUT_W-1] == {(PW-OUT_W+1){rne[PW-1]}});
            assign sat = hi_ok ? rne[OUT_W-1:0]
                       : (rne[PW-1] ? {1'b1, {(OUT_W-1){1'b0}}} : {1'b0, {(OUT_W-1){1'b1}}});
        end
        if (Y_W > OUT_W) begin : g_sat_ext
            assign sat_y = {{(Y_W-OUT_W){sat[OUT_W-1]}}, sat};
        end else begin : g_sat_same
            assign sat_y = sat;
        end
        if (Y_W > IN_W) begin : g_x_ext
            assign x_y = {{(Y_W-IN_W){x[IN_W-1]}}, x};
        end else begin : g_x_same
            assign x_y = x;
        end
    endgenerate

    assign y = en ? sat_y : x_y;
endmodule

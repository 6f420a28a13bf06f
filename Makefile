# frank-jit: `make run` runs the seed component demo, `make test` the whole test suite.
# Both install what is missing from Debian's packages first, then configure and build.
# Hardening: `make test-asan`, `make test-tsan` (the suite under sanitizers) and `make fuzz`.

BUILD ?= build
JOBS ?= 2
BUILD_TYPE ?= Release

# What the build and the tests need, from Debian 12's own archive.
PACKAGES := cmake ninja-build g++ make llvm-19-dev libfmt-dev googletest libgtest-dev \
            libgmock-dev libbenchmark-dev

# The fuzzers need clang and its libFuzzer and sanitizer runtimes; the sanitizer builds of the
# test suite use g++ and need nothing more.
FUZZ_PACKAGES := clang-19 libclang-rt-19-dev

# `make bench`: the plot needs matplotlib; the peers are optional (`make bench-peers`).
BENCH_PACKAGES := python3-matplotlib
PEER_PACKAGES := libopenblas-dev libdnnl-dev libxsmm-dev
BENCH_OUT ?= $(BUILD)/bench
BENCH_REPETITIONS ?= 5
BENCH_MIN_TIME ?= 0.2
PEERS_VENV ?= $(BUILD)/peers-venv
# ggml from the llama.cpp of this llama-cpp-python release (bench/build-ggml.sh); the build finds
# it in $(BUILD)/peers-ggml.
GGML_VERSION ?= 0.3.36

ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
SANITIZER_BUILD_TYPE ?= RelWithDebInfo
# Line tables are all a sanitizer's stack trace needs; -O1 -g1 halves the instrumented builds'
# compile time against -O2 -g (64 s to 30 s for the code generator), most of CI's time.
SANITIZER_CXX_FLAGS ?= -O1 -g1 -DNDEBUG
SANITIZERS_DIR := $(CURDIR)/tools/sanitizers
# Sanitizer reports fail the test that triggers them; the suppressions are for libLLVM only.
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:strict_init_order=1:detect_stack_use_after_return=1 \
            LSAN_OPTIONS=suppressions=$(SANITIZERS_DIR)/lsan.supp:print_suppressions=0 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
TSAN_ENV := TSAN_OPTIONS=suppressions=$(SANITIZERS_DIR)/tsan.supp:halt_on_error=1:second_deadlock_stack=1

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps deps-fuzz deps-bench configure build run test test-avx2 bench bench-peers clean test-asan \
        test-tsan fuzz

all: build

# Installs the packages named in $(1) that are missing.
define install-missing
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing:$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

deps:
	$(call install-missing,$(PACKAGES))

deps-fuzz:
	$(call install-missing,$(PACKAGES) $(FUZZ_PACKAGES))

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/bin/frank-demo

test: build
	ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure --timeout 300

# The whole suite again with kernels for x86-64-v3 (AVX2, 16 vector registers) whatever the host:
# on an AVX-512 host it also checks the strategies, loop IR and results AVX2 hosts get.
test-avx2: build
	FRANK_CPU=x86-64-v3 ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure --timeout 300

# Every benchmark shape against generic loops, the installed peers and the measured roofline, in
# one run: the JSON report, the roofline plot and a Markdown table land in $(BENCH_OUT).
# Repetitions of different implementations interleave, so that a change in the machine's
# bandwidth over the run (other tenants) falls on all of them alike.
bench: build deps-bench
	@mkdir -p $(BENCH_OUT)
	$(BUILD)/bin/frank-bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	@# Debian's OpenBLAS (0.3.21) takes Intel CPUs newer than it (a 5th-generation Xeon) for a
	@# Prescott and runs SSE3 code there: S7 120 ms, against 19.3 with the AVX-512 kernels it
	@# runs on every Intel CPU with AVX-512 it knows.
	if [ -z "$$OPENBLAS_CORETYPE" ] && grep -qw avx512f /proc/cpuinfo && \
	  grep -qw GenuineIntel /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi; \
	$(BUILD)/bin/frank-shapes --benchmark_repetitions=$(BENCH_REPETITIONS) \
	  --benchmark_enable_random_interleaving=true \
	  --benchmark_report_aggregates_only=true --benchmark_min_time=$(BENCH_MIN_TIME) \
	  --benchmark_out=$(BENCH_OUT)/shapes.json --benchmark_out_format=json
	@rm -f $(BENCH_OUT)/torch.json; \
	if [ -x $(PEERS_VENV)/bin/python ]; then \
	  $(PEERS_VENV)/bin/python bench/peers_torch.py --repetitions=$(BENCH_REPETITIONS) \
	    --min-time=$(BENCH_MIN_TIME) --out=$(BENCH_OUT)/torch.json; \
	else echo "PyTorch: skipped (make bench-peers installs it)"; fi
	@rm -f $(BENCH_OUT)/iree.json; \
	if [ -x $(PEERS_VENV)/bin/python ] && $(PEERS_VENV)/bin/python -c "import iree.compiler, iree.runtime" 2>/dev/null; then \
	  $(PEERS_VENV)/bin/python bench/peers_iree.py --repetitions=$(BENCH_REPETITIONS) \
	    --min-time=$(BENCH_MIN_TIME) --out=$(BENCH_OUT)/iree.json; \
	else echo "IREE: skipped (make bench-peers installs it)"; fi
	/usr/bin/python3 bench/report.py $(BENCH_OUT)/shapes.json \
	  $$([ -f $(BENCH_OUT)/torch.json ] && echo $(BENCH_OUT)/torch.json) \
	  $$([ -f $(BENCH_OUT)/iree.json ] && echo $(BENCH_OUT)/iree.json) \
	  --json $(BENCH_OUT)/report.json --png $(BENCH_OUT)/roofline.png | tee $(BENCH_OUT)/report.md

deps-bench:
	$(call install-missing,$(PACKAGES) $(BENCH_PACKAGES))

# The optional peers: OpenBLAS, oneDNN and libxsmm from Debian, PyTorch and IREE (compiler and
# runtime) from PyPI in their own virtual environment, and ggml built from the llama.cpp source
# that PyPI's llama-cpp-python carries. The build finds the libraries when it is next configured.
bench-peers: deps-bench
	$(call install-missing,$(PEER_PACKAGES))
	@if [ ! -x $(PEERS_VENV)/bin/python ]; then \
	  python3 -m venv $(PEERS_VENV) && $(PEERS_VENV)/bin/pip install -q torch numpy || \
	  echo "PyTorch could not be installed from PyPI: its benchmarks will be skipped"; \
	fi
	@if ! $(PEERS_VENV)/bin/python -c "import iree.compiler, iree.runtime" 2>/dev/null; then \
	  $(PEERS_VENV)/bin/pip install -q iree-base-compiler iree-base-runtime || \
	  echo "IREE could not be installed from PyPI: its benchmarks will be skipped"; \
	fi
	@if [ ! -f $(BUILD)/peers-ggml/include/ggml.h ]; then \
	  bench/build-ggml.sh $(abspath $(BUILD))/peers-ggml $(PEERS_VENV)/bin/pip $(GGML_VERSION) || \
	  echo "ggml could not be built from PyPI's llama-cpp-python: its benchmarks will be skipped"; \
	fi
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer (g++). Kernels are
# JIT-compiled and not instrumented, so the benchmark-size tests stay fast enough to keep.
$(ASAN_BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(SANITIZER_BUILD_TYPE) \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SANITIZER_CXX_FLAGS)" -DFRANK_SANITIZE=address,undefined

test-asan: deps $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target frank-tests
	$(ASAN_ENV) ctest --test-dir $(ASAN_BUILD) -j $(JOBS) --output-on-failure --timeout 600

# The multithreaded tests (label `threads`, tests/CMakeLists.txt) under ThreadSanitizer (g++):
# only their binaries are built.
$(TSAN_BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(SANITIZER_BUILD_TYPE) \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SANITIZER_CXX_FLAGS)" -DFRANK_SANITIZE=thread

test-tsan: deps $(TSAN_BUILD)/build.ninja
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target frank-threaded-tests
	$(TSAN_ENV) ctest --test-dir $(TSAN_BUILD) -j $(JOBS) --output-on-failure --timeout 600 \
	  -L threads

# The libFuzzer targets (clang), each run for FUZZ_SECONDS over its seed corpus in fuzz/corpus.
$(FUZZ_BUILD)/build.ninja: CMakeLists.txt | deps-fuzz
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_CXX_COMPILER=clang++-19 -DFRANK_FUZZ=ON

fuzz: deps-fuzz $(FUZZ_BUILD)/build.ninja
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)

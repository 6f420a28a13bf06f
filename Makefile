# frank-jit: `make run` runs the seed component demo, `make test` the whole test suite.
# Both install what is missing from Debian's packages first, then configure and build.

BUILD ?= build
JOBS ?= 2
BUILD_TYPE ?= Release

# What the build and the tests need, from Debian 12's own archive.
PACKAGES := cmake ninja-build g++ make llvm-19-dev libfmt-dev googletest libgtest-dev \
            libgmock-dev libbenchmark-dev

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps configure build run test bench clean

all: build

deps:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing:$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/bin/frank-demo

test: build
	ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure --timeout 300

bench: build
	$(BUILD)/bin/frank-bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	bench/component_shapes.sh

clean:
	rm -rf $(BUILD)

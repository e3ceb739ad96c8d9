# Two commands do everything on a fresh machine:
#   make demo   set up, build, run the main job
#   make test   set up, build, run the tests
# PRESET picks the CMake preset (release, debug, ci).
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= $(shell nproc)

.PHONY: all setup build demo test gpu-test clean

all: build

setup:
	@scripts/setup.sh

build: setup
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# On the GPU machine: tests, memcheck and the benchmark tables (scripts/gpu-test.sh).
gpu-test: build
	@scripts/gpu-test.sh $(BUILD)

clean:
	rm -rf build

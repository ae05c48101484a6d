# Entry points: `make run` (demo on the embedded model) and `make test` (the whole suite).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build install run test test-asan fuzz bench train-tiny clean

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCROSSWORD_WERROR=ON $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# The binary and the shared libraries it needs beyond a Debian 12 base image, under PREFIX/bin and
# PREFIX/lib (what the Dockerfile's runtime stage copies).
PREFIX ?= /usr/local
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

run: build
	@scripts/demo $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600

test-asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan CMAKE_FLAGS="-DCROSSWORD_ASAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# libFuzzer run of the GGUF reader (clang, ASan/UBSan) on a corpus seeded with synthesized files.
FUZZ_SECONDS ?= 60
fuzz: deps
	@cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
	@cmake --build build-fuzz -j$(JOBS)
	@mkdir -p build-fuzz/corpus && build-fuzz/gguf_fuzz_seeds build-fuzz/corpus
	@build-fuzz/gguf_reader_fuzzer -max_total_time=$(FUZZ_SECONDS) -max_len=131072 -rss_limit_mb=4096 \
	  -print_final_stats=1 build-fuzz/corpus

# Retrains the embedded tiny model from scratch (corpus, BPE, ~105 min of CPU training in three stages, evaluation):
# writes models/clover-tiny.gguf; logs and the held-out evaluation go to $(BUILD)/tiny/.
train-tiny: build
	@reference/train_tiny.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-fuzz

# Entry points: `make run` (demo on the embedded model) and `make test` (the whole suite).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build install run test conformance test-asan test-sanitizers fuzz fuzz-build bench train-tiny clean

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

# llama.cpp's server test suite against `crossword serve` alone (tests/conformance; also part of
# `make test`: 178 s of one core on this 2-core machine at load 5-9).
conformance: build
	@cd $(BUILD) && ctest --output-on-failure -L conformance

test-asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan CMAKE_FLAGS="-DCROSSWORD_ASAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# Sanitizer runs of the tests where threads share state; .ci/run runs them after `make test` and
# the fuzzers. SANITIZERS picks the builds (both by default), each RelWithDebInfo at -O1 -g1:
#   asan: build-asan, ASan + UBSan (UBSan stops at the first report; LeakSanitizer checks every
#         exit, and the end-to-end harness fails a server that exits non-zero): every test
#         labelled server (HTTP threads, the scheduler and its slots, the prompt cache, metrics,
#         through the real clients; the server unit tests), then the ThreadPool tests and the
#         ones that read the host's memory limit and map, read and release model files (base_test's
#         MemoryLimit and MappedFile, cpu_repack_test: a use-after-free there once passed the
#         release build and failed every engine start under ASan), DraftControl's (its cost
#         table, a fixed ring per row count, is indexed by pass sizes) and the CPU executor's that
#         index its buffers by rows a pass skips or moves (need_rows, MoreLogits, the last
#         layer's kept rows), and the kernel tests (kernels_test, ~16 s: the SIMD kernels against
#         their twins on every target; UBSan once found a signed overflow in a benchmark helper's
#         lane sum there that no other run saw). They run
#         with no Vulkan driver: `--device auto` loads each driver to list devices, and Mesa
#         22.3.6-1+deb12u2's lavapipe leaks 128 bytes per load (a realloc at libvulkan_lvp.so
#         +0x78451), which LeakSanitizer reports after the driver is unloaded, in every test that
#         starts an engine; no suppression can name an unloaded module. The Vulkan code is tested
#         on lavapipe under the validation layers in make test.
#   tsan: build-tsan, stops at the first report: TSAN_TESTS, the unit tests of the scheduler,
#         output pipeline, metrics and thread pool, the CPU executor's row-split and pipelined
#         passes (blocks of rows that wait on each other's stages), and the end-to-end tests that run requests
#         concurrently (TSan runs 5-15x slower; the other end-to-end tests add time, not sharing).
#         server_drain is left to ASan and make test: its 60,000-token prompts ran past the test's
#         300 s under TSan (the rest of the set: 386 s on this loaded 2-core box, no report).
SANITIZERS ?= asan tsan
SANITIZER_TARGETS = crossword server_unit_test server_metrics_unit_test server_protocol_unit_test core_test \
  base_test cpu_repack_test decode_draft_control_test cpu_executor_test kernels_test
TSAN_TESTS ?= ^(server_(concurrency|hostile|errors)|Scheduler|Api|OutputStream|StopFilter|RenderMetrics|RequestMetrics|ParseMetricsCompat|Histogram|ThreadPool|CpuExecutor[.](PipelinedRowBlocks|RowSplit))
test-sanitizers: deps
	@for s in $(SANITIZERS); do \
	  flag=$$(echo $$s | tr a-z A-Z); \
	  cmake -S . -B build-$$s -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCROSSWORD_$$flag=ON >/dev/null && \
	  cmake --build build-$$s -j$(JOBS) --target $(SANITIZER_TARGETS) || exit 1; \
	done
	@if echo "$(SANITIZERS)" | grep -qw asan; then \
	  cd build-asan && export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1" && \
	  export VK_ICD_FILENAMES=/nonexistent/vulkan-icd.json VK_DRIVER_FILES=/nonexistent/vulkan-icd.json && \
	  ctest --output-on-failure -j$(JOBS) --timeout 900 -L server && \
	  ctest --output-on-failure --timeout 300 \
	    -R '^(ThreadPool|MemoryLimit|MappedFile|CpuExecutor[.](Q4_0Copies|CopiesSay|TheLastLayer|NeedRows|MoreLogits|PipelinedRowBlocks|RowSplit)|DraftControl|(KernelsSmoke|MatMul|MatMulRef|PrepareActivations|Activations|Repack|Int8PeakRate|Ops|Attention|PairSum|GatedDeltaRule)[.])'; \
	fi
	@if echo "$(SANITIZERS)" | grep -qw tsan; then \
	  cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -j$(JOBS) --timeout 900 -R '$(TSAN_TESTS)'; \
	fi

# libFuzzer runs (clang, ASan/UBSan), FUZZ_SECONDS each, one after the other: the GGUF reader on a
# corpus seeded with synthesized files; the request path (a selector byte, then a JSON body of the
# OpenAI, Anthropic Messages or Responses routes -> gate -> translation -> validation -> template
# -> output parser); raw HTTP bytes (the transport's framing with Beast's parser and its limits,
# pipelining, then each body down the request path). Both request corpora are seeded by
# fuzz/make_request_seeds.py from the test requests in fuzz/request_seeds. Findings (crash-*,
# leak-*, timeout-*) are written to build-fuzz/; the corpora grow in build-fuzz/*corpus.
FUZZ_SECONDS ?= 60
FUZZ_NICE ?=
fuzz: deps fuzz-build
	@$(FUZZ_NICE) build-fuzz/gguf_reader_fuzzer -max_total_time=$(FUZZ_SECONDS) -max_len=131072 \
	  -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build-fuzz/ build-fuzz/corpus
	@$(FUZZ_NICE) build-fuzz/request_fuzzer -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	  -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 -dict=fuzz/json.dict \
	  -artifact_prefix=build-fuzz/ build-fuzz/request-corpus
	@$(FUZZ_NICE) build-fuzz/http_fuzzer -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	  -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 -dict=fuzz/http.dict \
	  -artifact_prefix=build-fuzz/ build-fuzz/http-corpus

fuzz-build:
	@cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
	@cmake --build build-fuzz -j$(JOBS)
	@mkdir -p build-fuzz/corpus && build-fuzz/gguf_fuzz_seeds build-fuzz/corpus
	@fuzz/make_request_seeds.py build-fuzz/request-corpus build-fuzz/http-corpus

# Retrains the embedded tiny model from scratch (corpus, BPE, ~105 min of CPU training in three stages, evaluation):
# writes models/clover-tiny.gguf; logs and the held-out evaluation go to $(BUILD)/tiny/.
train-tiny: build
	@reference/train_tiny.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz

# The two commands a newcomer needs: `make demo` and `make test`. Each installs what is missing first.
JOBS ?= $(shell nproc)
# One test more than cores: many tests wait on child processes (MPI nodes, weight servers, stalls that
# must time out) and leave a core idle meanwhile.
CTEST_JOBS ?= $(shell echo $$(( $(JOBS) + 1 )))
# `make test`'s time on 2 cores bounds the fuzzing CI does on every run: the seed corpora replayed and a short
# search beyond them, 20 s on the safetensors header and 6 s on each JSON reader, two at a time (a longer
# campaign: make fuzz FUZZ_SECONDS=600 JSON_FUZZ_SECONDS=120).
FUZZ_SECONDS ?= 20
DEMO_MODEL := build/tiny-qwen3-moe

.PHONY: all deps build demo test test-asan fuzz bench bench-load bench-reload clean readme-matrix

# Ninja once installed (scripts/install-deps.sh installs it, so it is looked for when the recipe runs,
# after deps): it schedules the build's few hundred steps with less overhead than make. A build folder
# made before keeps its generator.
generator = $$(test -f $(1)/CMakeCache.txt || ! command -v ninja >/dev/null || echo -GNinja)

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	cmake -S . -B build $(call generator,build) -DCMAKE_BUILD_TYPE=Release -DSHARDLOAD_TESTS=OFF -DSHARDLOAD_FAULT_INJECTION=OFF
	cmake --build build -j $(JOBS)

# The main job on the embedded tiny MoE model: validate it, plan and load a tp 4 x ep 2 layout, export it,
# then the same ranks from Python (zero-copy torch tensors, an update in place).
demo: build
	build/shardload inspect --summary $(DEMO_MODEL)
	build/shardload plan $(DEMO_MODEL) --tp 4 --ep 2
	build/shardload load $(DEMO_MODEL) --tp 4 --ep 2
	build/shardload export $(DEMO_MODEL) --tp 4 --ep 2 --out build/tiny-qwen3-moe-tp4-ep2 --overwrite
	PYTHONPATH=build/python /usr/bin/python3 python/examples/demo.py $(DEMO_MODEL)

# README.md's support matrix is `shardload support`'s output (tests/cli/readme_matrix_test.cc fails
# while they differ): this rewrites it after a change to the families, formats or engine tables.
readme-matrix: build
	bash scripts/readme-matrix.sh build/shardload README.md

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer, then the fuzz campaigns. The
# clang suite build has the fuzz targets built already (CMakeLists.txt: SHARDLOAD_FUZZ_IN_SUITE); a g++
# one (SANITIZE_CXX=g++) leaves them to the separate build of `make fuzz`.
test: test-asan
	@if [ -x build-asan/fuzz/safetensors_header_fuzz ]; then \
	  $(MAKE) --no-print-directory fuzz-campaigns FUZZ_BUILD=build-asan; \
	else \
	  $(MAKE) --no-print-directory fuzz; \
	fi

# -O1 and line tables only (file:line in sanitizer reports, no variable info): ASan's recommended
# optimization, and on 2 cores the build took 527 s against 840 s with -O2 -g, the tests 46 s against 41 s.
# clang (the fuzz targets' compiler) instruments for ASan+UBSan in about half g++ 12's time: on 2 cores
# the suite built in 271 s against 485 s with g++, and its tests ran in 197 s against 211 s
# (CMakeLists.txt: which code is -O0). SANITIZE_CXX=g++ builds it with g++.
# The clone's own path is mapped to "." in debug info and __FILE__, so that an object is the same in every clone.
SANITIZE_FLAGS := -O1 -g1 -DNDEBUG -ffile-prefix-map=$(CURDIR)=.
SANITIZE_CXX ?= clang++
# The compiler cache (ccache, which scripts/install-deps.sh installs), outside the clone as the PyPI environments
# are, shared by every clone on the machine: paths under the clone are hashed relative to it (base_dir, with the
# build's paths in tests/support/test_paths.cc alone), so a fresh clone compiles only the files a commit changed.
# CI clones afresh each run; the sanitized build is most of `make test`'s first minutes. SHARDLOAD_CCACHE=0: none.
SHARDLOAD_CCACHE ?= 1
CCACHE_DIR ?= $(HOME)/.cache/shardload/ccache
ccache_launcher = $$(if [ "$(SHARDLOAD_CCACHE)" != 0 ] && command -v ccache >/dev/null; then \
  echo "-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_DIR=$(CCACHE_DIR);CCACHE_BASEDIR=$(CURDIR);CCACHE_NOHASHDIR=true;CCACHE_MAXSIZE=6G;ccache"; \
  else echo "-DCMAKE_CXX_COMPILER_LAUNCHER="; fi)
# The real producers' PyPI environment (transformers, llm-compressor, torch, the official safetensors),
# made once per lock file and cached outside the clone (scripts/pypi-env.sh); if it cannot be made (no
# network), its tests say they skipped.
PRODUCERS_LOCK := tests/producers/requirements.lock
# transformers 5.25 (the 2026 families' producer) in one of its own: llm-compressor holds the producers' at 5.17.
TRANSFORMERS_LOCK := tests/producers/requirements-transformers.lock
# The engines' (vLLM, then SGLang installed over it with --no-deps), the same way: tests/engines/.
ENGINES_LOCKS := tests/engines/requirements.lock tests/engines/requirements-nodeps.lock
# REAL_TOOLS=0: the suite without the real tools' environments (their tests say they skipped), e.g.
# for a quick loop on shardload's own code; CI runs them.
REAL_TOOLS ?= 1
pypi_env = $$(if [ "$(REAL_TOOLS)" != 0 ]; then bash scripts/pypi-env.sh $(1) || echo ""; fi)
test-asan: asan-build
	cd build-asan && ctest --output-on-failure -j $(CTEST_JOBS) -LE matrix

# The cross-products `make test` leaves out (ctest label matrix): the engines' whole cell matrix
# (tests/engines/test_vllm.py, test_vllm_int.py, test_sglang.py: every family and format against the live vLLM
# and SGLang, 2,276 test-seconds on 2 cores at 4d31710), which `make test` leaves to its gate (test_*_gate.py)
# and to the export digests the matrix records (test_export_digests.py), and the tests' cases marked matrix.
# Run it before a change to what `export --engine` writes lands; SHARDLOAD_ENGINE_DIGESTS=record then
# records the exports it accepted (docs/testing.md).
# SHARDLOAD_TEST_MATRIX=1: the C++ tests' matrix cases (tests/support/test_matrix.h: MpirunFamilyTest's other
# families, the real configs' other layouts), skipped otherwise; CXX_MATRIX_TESTS names the tests that have some.
CXX_MATRIX_TESTS := ^Families/MpirunFamilyTest|^TinyRealConfigs\.(EveryConfigIsASmallSparseCheckpointThatPlans|KimiK25)
test-matrix: asan-build
	cd build-asan && ctest --output-on-failure -j $(CTEST_JOBS) -L matrix
	cd build-asan && SHARDLOAD_TEST_MATRIX=1 ctest --output-on-failure -j $(CTEST_JOBS) -R '$(CXX_MATRIX_TESTS)'

.PHONY: asan-build test-matrix
asan-build: deps
	producers=$(call pypi_env,$(PRODUCERS_LOCK)); \
	transformers=$(call pypi_env,$(TRANSFORMERS_LOCK)); \
	engines=$(call pypi_env,$(ENGINES_LOCKS)); \
	CXX=$(SANITIZE_CXX) cmake -S . -B build-asan $(call generator,build-asan) $(ccache_launcher) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDLOAD_SANITIZE=ON -DSHARDLOAD_BENCH=OFF \
	  -DSHARDLOAD_FAULT_INJECTION=ON "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_FLAGS)" "-DSHARDLOAD_PRODUCERS_PYTHON=$$producers" \
	  "-DSHARDLOAD_TRANSFORMERS_PYTHON=$$transformers" \
	  "-DSHARDLOAD_ENGINES_PYTHON=$$engines"
	cmake --build build-asan -j $(JOBS)

# Every entry point that parses untrusted bytes has a libFuzzer target: the safetensors header
# (FUZZ_SECONDS), then each JSON reader (JSON_FUZZ_SECONDS each) from a shared seed corpus.
JSON_FUZZ_SECONDS ?= 6
JSON_FUZZ_TARGETS := config_json_fuzz expert_map_fuzz expert_load_fuzz request_body_fuzz shm_manifest_fuzz \
  export_manifest_fuzz
fuzz: deps
	CXX=clang++ cmake -S . -B build-fuzz $(call generator,build-fuzz) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDLOAD_FUZZ=ON \
	  -DSHARDLOAD_TESTS=OFF -DSHARDLOAD_BENCH=OFF -DSHARDLOAD_DEMO_MODEL=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_FLAGS)"
	cmake --build build-fuzz -j $(JOBS) --target safetensors_header_fuzz $(JSON_FUZZ_TARGETS)
	$(MAKE) --no-print-directory fuzz-campaigns FUZZ_BUILD=build-fuzz

FUZZ_BUILD ?= build-fuzz
.PHONY: fuzz-campaigns
fuzz-campaigns:
	$(MAKE) --no-print-directory -j $(JOBS) $(addprefix fuzz-run-,safetensors_header_fuzz $(JSON_FUZZ_TARGETS))

# Each campaign is one process on one core: JOBS of them at once (the same seconds each as one by one).
fuzz-run-safetensors_header_fuzz:
	mkdir -p $(FUZZ_BUILD)/corpus
	$(FUZZ_BUILD)/fuzz/safetensors_header_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	  $(FUZZ_BUILD)/corpus fuzz/corpus
fuzz-run-%:
	mkdir -p $(FUZZ_BUILD)/corpus-$*
	$(FUZZ_BUILD)/fuzz/$* -max_total_time=$(JSON_FUZZ_SECONDS) -max_len=8192 $(FUZZ_BUILD)/corpus-$* fuzz/corpus_json

bench: build
	bash bench/run_convert.sh

bench-load: build
	bash bench/load_bench.sh

bench-reload: build
	bash bench/reload_bench.sh

# Limits, warm and cold loads, Python baselines in one run: bench/report.md and bench/report.png.
.PHONY: bench-run
bench-run: build
	bash bench/run --bin build

clean:
	rm -rf build build-asan build-fuzz

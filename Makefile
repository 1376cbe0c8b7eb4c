# The two commands in README.md. Each installs what it needs first (scripts/setup.sh, idempotent):
# `run` only what building needs, `test` the test tools too.
#   make run [ARGS="stream --duration 10"]   build and run bbrscope (as root)
#   make test                                 the whole test suite (as root: it loads BPF programs),
#                                             with the kernel matrix beside it (cargo xtask kernels,
#                                             QEMU, x86_64 and arm64 guests)
ARGS ?= top

.PHONY: run test setup bench

setup:
	@scripts/setup.sh

run:
	@scripts/setup.sh build
	cargo build --release -p bbrscope
	./target/release/bbrscope $(ARGS)

# Each step through scripts/step.sh, which prints its time, and at the end every step's time and
# the whole wall time (the suite's own cost: issue #42).
STEP = @scripts/step.sh

test:
	@scripts/step.sh start
	$(STEP) scripts/setup.sh
	# Formatting and lints (workspace lints: SAFETY comments on unsafe blocks, no stray stdout).
	$(STEP) cargo fmt --check
	$(STEP) cargo clippy --all-targets -- -D warnings
	# The kernel programs, for their own target (not a default member: see Cargo.toml).
	$(STEP) sh -c 'cd bbrscope-ebpf && cargo clippy --target bpfel-unknown-none -Z build-std=core --release --lib --bins -- -D warnings'
	# The root-free tests (bbrscope/tests/library; apply/'s rules, unit tests), as nobody: none may come to need root.
	$(STEP) scripts/test-library.sh
	# The unit tests and the black-box tests, built first (the matrix below builds beside them).
	$(STEP) cargo test --all-targets --no-run
	# Unit tests and the black-box tests, as root (they load BPF programs, make namespaces); this
	# runs the library's tests again, a few seconds. The default members: the eBPF crate only
	# builds for the BPF target (via bbrscope's build script).
	# Beside them, the kernel matrix: bbrscope on Debian's kernels 5.10 to 7.x under QEMU
	# (docs/kernel-matrix.md), then the same checks on arm64 guests (Debian's arm64 kernels on
	# qemu-system-aarch64, bbrscope cross-built static): all five series, now that the matrix's
	# time is hidden beside the tests (until 2026-12-01 only 5.10 and 7, to keep CI within its
	# hour). The script says which tests wait for the matrix and why.
	$(STEP) scripts/beside-matrix.sh \
	    'cargo xtask kernels && cargo xtask kernels --arch aarch64' \
	    cargo test --all-targets -- --test-threads=2
	@scripts/step.sh end

bench: setup
	cargo xtask bench

#!/usr/bin/env bash
# Installs what bbrscope needs on a Debian 12 (bookworm) machine, as root:
#   scripts/setup.sh build   what building it needs (make run): the pinned nightly, bpf-linker
#                            and the LLVM it is built against
#   scripts/setup.sh         that, and what the tests, the kernel matrix and the package need
#                            (make test): QEMU, Prometheus, Ansible, debootstrap, musl, ...
# Idempotent: each step checks first, so a second run installs nothing.
# See docs/toolchain.md for why these exact versions: bpf-linker's LLVM must match the
# LLVM inside the nightly that compiles the eBPF crate (LLVM 22 here), or linking fails with
# "Invalid record".
set -euo pipefail

NIGHTLY="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$(dirname "$0")/../rust-toolchain.toml")"
LLVM_MAJOR=22
BPF_LINKER_VERSION=0.13.0
# bpf-linker is built against these.
BUILD_PACKAGES=(llvm-${LLVM_MAJOR}-dev libpolly-${LLVM_MAJOR}-dev libzstd-dev zlib1g-dev)
TEST_PACKAGES=(iproute2 nftables tmux bpftrace procps dwarves bpftool fonts-dejavu-core
              # cargo xtask kernels: boots Debian kernels under QEMU with a busybox guest.
              qemu-system-x86 busybox-static xz-utils
              # bbrscope/tests/export.rs: a real Prometheus scrapes `bbrscope export`.
              prometheus
              # bbrscope/tests/ansible.rs: runs packaging/ansible/canary-rollout.yml (builtin modules only).
              ansible-core
              # bbrscope/tests/export.rs: installs the .deb into a fresh Debian root it makes.
              debootstrap
              # bbrscope/tests/export.rs: the Debian root above becomes a disk image (mkfs.ext4 -d) that
              # cargo xtask boot starts under QEMU with systemd as PID 1.
              e2fsprogs
              # bbrscope/tests/export.rs: the .deb is checked by lintian --pedantic.
              lintian
              # bbrscope/tests/stream.rs: the README's jq examples run on real output.
              jq
              # cargo xtask dist: musl-gcc compiles the static binary's allocator (mimalloc).
              musl-tools)
# cargo xtask dist --arch aarch64 on an x86_64 machine: the cross gcc compiles the allocator
# against musl's arm64 headers (musl-dev:arm64, so arm64 becomes a foreign dpkg architecture)
# and links; qemu-user-static runs the binary to write its pages and completions.
# cargo xtask kernels --arch aarch64: qemu-system-arm boots Debian's arm64 kernels.
ARM64_PACKAGES=(gcc-aarch64-linux-gnu musl-dev:arm64 qemu-user-static qemu-system-arm)

log() { printf 'setup: %s\n' "$*" >&2; }

case "${1:-all}" in
  build) APT_PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  all)
    APT_PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}")
    if [ "$(uname -m)" = x86_64 ]; then
      APT_PACKAGES+=("${ARM64_PACKAGES[@]}")
      if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        log "adding arm64 as a foreign dpkg architecture (for musl-dev:arm64)"
        dpkg --add-architecture arm64
      fi
    fi
    ;;
  *) echo "usage: scripts/setup.sh [build]  (build: only what building bbrscope needs)" >&2; exit 2 ;;
esac

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Explicit install: rustup's auto-install from rust-toolchain.toml may be disabled (RUSTUP_AUTO_INSTALL=0).
if ! rustup toolchain list | grep -q "^${NIGHTLY}"; then
  log "installing Rust toolchain ${NIGHTLY}"
  rustup toolchain install "$NIGHTLY" --profile minimal -c rust-src -c clippy -c rustfmt
fi
# The shipped binaries' targets (`cargo xtask dist`): static, musl's libc linked in; from an
# x86_64 machine, aarch64 too.
MUSL=("$(uname -m)-unknown-linux-musl")
[ "$(uname -m)" = x86_64 ] && MUSL+=(aarch64-unknown-linux-musl)
for t in "${MUSL[@]}"; do
  if [ "${1:-all}" = all ] && ! rustup target list --toolchain "$NIGHTLY" --installed | grep -qx "$t"; then
    log "adding the Rust target ${t}"
    rustup target add --toolchain "$NIGHTLY" "$t"
  fi
done

want="bpf-linker v${BPF_LINKER_VERSION}"
if ! cargo +"$NIGHTLY" install --list 2>/dev/null | grep -q "^${want}:"; then
  log "building ${want} against LLVM ${LLVM_MAJOR} (takes a few minutes)"
  env LLVM_PREFIX=/usr/lib/llvm-${LLVM_MAJOR} "LLVM_SYS_${LLVM_MAJOR}1_PREFIX=/usr/lib/llvm-${LLVM_MAJOR}" \
    cargo +"$NIGHTLY" install bpf-linker --version "$BPF_LINKER_VERSION" --locked \
      --no-default-features --features llvm-${LLVM_MAJOR}
fi

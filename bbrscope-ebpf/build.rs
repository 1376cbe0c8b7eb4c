use which::which;

/// Building this crate needs the `bpf-linker` binary (installed by scripts/setup.sh). Rebuild
/// when it changes, since the linker's LLVM decides whether the object links at all.
fn main() {
    let bpf_linker = which("bpf-linker")
        .expect("bpf-linker not found on PATH: run scripts/setup.sh (it builds bpf-linker against LLVM 22)");
    println!("cargo:rerun-if-changed={}", bpf_linker.display());
}

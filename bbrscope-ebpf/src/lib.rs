//! What bbrscope's two kernel programs (main.rs and bin/setcc.rs) share: the panic handler and
//! the license. Each binary links it with `use bbrscope_ebpf as _;`.
//!
//! Cargo also needs this library target so that bbrscope can name the crate as a build
//! dependency (to rebuild when the kernel programs change); that host build never links it.
#![no_std]

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// GPL-compatible: bpf_probe_read_kernel and the ring buffer helpers are GPL-only. The loader
/// (aya) reads it from the object's `license` section.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
pub static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

//! `bbrscope apply ALGO --cgroup PATH`: a sock_ops program that gives every new TCP connection of
//! the cgroup the congestion-control algorithm named in [`CC`].
//!
//! It acts when the connection becomes established (both the connecting and the accepting side),
//! the point the kernel's own example uses: the algorithm is then initialised once the handshake
//! is done, and it wins over a per-route `congctl`, which the kernel applies earlier, at connect.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::{BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB},
    helpers::bpf_setsockopt,
    macros::sock_ops,
    programs::SockOpsContext,
};
use bbrscope_common::CC_NAME_LEN;
// The panic handler and the license.
use bbrscope_ebpf as _;

const SOL_TCP: i32 = 6;
const TCP_CONGESTION: i32 = 13;

/// The algorithm's name, NUL-padded; userspace sets it at load time.
#[unsafe(no_mangle)]
static CC: [u8; CC_NAME_LEN] = [0; CC_NAME_LEN];

#[sock_ops]
pub(crate) fn bbrscope_setcc(ctx: SockOpsContext) -> u32 {
    let op = ctx.op();
    if op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB || op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB {
        // A stack copy: the helper reads the name from memory the verifier knows to be readable,
        // and the volatile read keeps the compiler from folding the zeroed initializer.
        // SAFETY: CC is a global of the program, alive and readable for its whole run.
        let mut name: [u8; CC_NAME_LEN] = unsafe { core::ptr::read_volatile(&raw const CC) };
        // A failure (e.g. the algorithm's module was unloaded) leaves the socket on the default;
        // there is nobody to report it to here.
        // SAFETY: a sock_ops context at an established callback, where setting TCP_CONGESTION is
        // allowed; `name` is readable for the length passed.
        unsafe {
            bpf_setsockopt(ctx.ops.cast(), SOL_TCP, TCP_CONGESTION, name.as_mut_ptr().cast(), CC_NAME_LEN as i32)
        };
    }
    // 1 lets the other sock_ops programs of the cgroup run and keeps their replies.
    1
}

//! The bpf(2) commands aya does not offer (querying a cgroup's programs, detaching a pinned
//! link, opening a pin), each as a safe function: the `union bpf_attr` is packed here, and the
//! memory it points to is borrowed for exactly the call.

use std::{
    ffi::CStr,
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
};

const BPF_OBJ_GET: i32 = 7;
const BPF_PROG_QUERY: i32 = 16;
const BPF_LINK_DETACH: i32 = 34;

/// bpf(2) with a hand-packed `union bpf_attr` of 64 bytes: each command's fields at the offsets
/// of include/uapi/linux/bpf.h, the rest zero (the kernel refuses non-zero bytes it does not
/// know). Private: each caller below keeps the memory its pointers name alive through the call.
fn bpf(cmd: i32, attr: &mut [u64; 8]) -> io::Result<i64> {
    // SAFETY: `attr` is 64 writable bytes, the size passed; the kernel reads and writes only
    // within them, and through the pointers inside them, which each caller borrows for the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr) as u32) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// What BPF_PROG_QUERY answered.
pub(crate) struct Query {
    /// How many programs are attached (may exceed the ids filled in).
    pub(crate) count: usize,
    /// The attach flags of the target's own programs (BPF_F_ALLOW_MULTI …).
    pub(crate) attach_flags: u32,
}

/// BPF_PROG_QUERY: the programs of `attach_type` attached to `target` (with `query_flags`),
/// their ids written into `ids`.
pub(crate) fn prog_query(
    target: BorrowedFd<'_>,
    attach_type: u32,
    query_flags: u32,
    ids: &mut [u32],
) -> io::Result<Query> {
    // union bpf_attr for BPF_PROG_QUERY: target_fd, attach_type, query_flags, attach_flags,
    // prog_ids (pointer), prog_cnt.
    let mut attr = [0u64; 8];
    attr[0] = target.as_raw_fd() as u64 | u64::from(attach_type) << 32;
    attr[1] = u64::from(query_flags);
    attr[2] = ids.as_mut_ptr() as u64;
    attr[3] = ids.len() as u64;
    bpf(BPF_PROG_QUERY, &mut attr)?;
    Ok(Query { count: (attr[3] as u32) as usize, attach_flags: (attr[1] >> 32) as u32 })
}

/// BPF_LINK_DETACH: the link stops running, whoever else still holds it.
pub(crate) fn link_detach(link: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = [0u64; 8];
    attr[0] = link.as_raw_fd() as u64;
    bpf(BPF_LINK_DETACH, &mut attr).map(drop)
}

/// BPF_OBJ_GET: a new descriptor for the object pinned at `path`.
pub(crate) fn obj_get(path: &CStr) -> io::Result<OwnedFd> {
    let mut attr = [0u64; 8];
    attr[0] = path.as_ptr() as u64;
    let fd = bpf(BPF_OBJ_GET, &mut attr)?;
    // SAFETY: BPF_OBJ_GET returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

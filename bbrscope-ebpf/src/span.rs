//! A sample's socket fields in one read: the socket's bytes that hold all of them (the
//! [`bbrscope_common::Span`] userspace found in BTF) are copied with one `bpf_probe_read_kernel`
//! into a per-CPU buffer, and each field is taken out of that buffer. On this project's machine a
//! helper call costs more than copying a kilobyte, and a sample needs about thirty fields.
//!
//! The buffer is per CPU, and a program can be interrupted on its CPU by another that also takes
//! a sample (a sock_ops callback in process context, e.g. the backlog processed at
//! `release_sock` or the state change of `close()`, by the softirq's callback for another
//! socket). On a preemptible kernel (`preempt=full` or `lazy`; since 5.11 cgroup programs run
//! with migration, not preemption, disabled) a process-context callback can also be preempted by
//! another task's, which may still be running when the first resumes: programs on one CPU do not
//! nest like interrupts, so no count of "levels in use" says which buffer is free. So each CPU
//! has a few buffers, and a program [`claim`]s one for itself alone.

use core::ffi::c_void;

use aya_ebpf::{helpers::generated::bpf_probe_read_kernel, macros::map, maps::PerCpuArray};
use bbrscope_common::{BitField, CA_PRIV_LEN, FieldSpec, SPAN_BUF};

use crate::{
    config::conf,
    flow::{claim, release},
};

const WORDS: usize = SPAN_BUF / 8;
/// Words past the span a read at its last word may touch (the `ca_priv` copy, 13 words, and
/// the second word of a field that crosses a word boundary): their content is never used, the
/// verifier only needs them to be inside the buffer.
const SLACK: usize = CA_PRIV_LEN / 8 + 3;
/// Buffers per CPU: process context, softirq, hardirq, NMI, or tasks preempting each other.
const LEVELS: usize = 4;

#[repr(C)]
pub(crate) struct Scratch {
    /// Per buffer: programs on this CPU that have added themselves (see the module's comment).
    users: [u64; LEVELS],
    levels: [[u64; WORDS + SLACK]; LEVELS],
}

#[map]
static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);

/// The socket's span as read at one instant; gives its buffer back when dropped.
pub(crate) struct Span {
    words: *const u64,
    /// The count of the buffer `words` is in.
    users: *mut u64,
    /// The socket offset of `words[0]`.
    off: u32,
}

impl Span {
    /// Reads the span of socket `sk`; `None` when every buffer of this CPU is held (never
    /// expected: sock_ops and these tracepoints nest at most twice, and a preempted callback is
    /// rare). A failed read (a bad address, which a live socket never is) leaves zeros, as a
    /// failed read per field did.
    #[inline(always)]
    pub(crate) fn read(sk: u64) -> Option<Span> {
        let s = SCRATCH.get_ptr_mut(0)?;
        // SAFETY: `s` is this CPU's value of the map (the program cannot migrate); the buffer
        // of a claimed slot is this program's alone until `drop` releases it.
        unsafe {
            let level = claim(&raw mut (*s).users)?;
            let words = (&raw mut (*s).levels).cast::<[u64; WORDS + SLACK]>().add(level).cast::<u64>();
            let len = conf!(span.len);
            let off = conf!(span.off);
            if len as usize <= SPAN_BUF {
                bpf_probe_read_kernel(words.cast::<c_void>(), len, (sk + u64::from(off)) as *const c_void);
            }
            Some(Span { words, users: (&raw mut (*s).users).cast::<u64>().add(level), off })
        }
    }

    /// The word at byte `rel` of the span (rounded down to a word), and the next one.
    #[inline(always)]
    fn words_at(&self, rel: u32) -> (u64, u64) {
        let w = ((rel >> 3) as usize) & (WORDS - 1);
        // SAFETY: `w < WORDS`, and the level has `SLACK` more words.
        unsafe { (*self.words.add(w), *self.words.add(w + 1)) }
    }

    /// `len` bytes (1..=8) at socket offset `off`, zero-extended (little-endian), as
    /// `bpf_probe_read_kernel` of those bytes into a zeroed `u64` gave.
    #[inline(always)]
    pub(crate) fn bytes(&self, off: u32, len: u32) -> u64 {
        let rel = off.wrapping_sub(self.off);
        let (lo, hi) = self.words_at(rel);
        let shift = (rel & 7) * 8;
        let mut v = lo >> shift;
        if shift != 0 {
            v |= hi << (64 - shift);
        }
        if len < 8 { v & ((1u64 << (len * 8)) - 1) } else { v }
    }

    /// A sample's field slot: 0 when this kernel lacks the field.
    #[inline(always)]
    pub(crate) fn field(&self, f: FieldSpec) -> u64 {
        if f.len > 0 && f.len <= 8 { self.bytes(f.off, f.len) } else { 0 }
    }

    #[inline(always)]
    pub(crate) fn bits(&self, f: BitField) -> u32 {
        let word = self.bytes(f.off, 4) as u32;
        (word >> f.shift) & ((1u32 << f.bits) - 1)
    }

    /// `CA_PRIV_LEN` bytes at socket offset `off` (a multiple of 8: userspace checks), as words.
    #[inline(always)]
    pub(crate) fn priv_words(&self, off: u32, out: &mut [u64; CA_PRIV_LEN / 8]) {
        let w = ((off.wrapping_sub(self.off) >> 3) as usize) & (WORDS - 1);
        let mut i = 0;
        while i < CA_PRIV_LEN / 8 {
            // SAFETY: `w < WORDS` and `i < SLACK`.
            out[i] = unsafe { *self.words.add(w + i) };
            i += 1;
        }
    }
}

impl Drop for Span {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the count of the buffer this program took in `read`, on the same CPU.
        unsafe { release(self.users) };
    }
}

//! A sample's socket fields in one read: the socket's bytes that hold all of them (the
//! [`bbrscope_common::Span`] userspace found in BTF) are copied with one `bpf_probe_read_kernel`
//! into a per-CPU buffer, and each field is taken out of that buffer. On this project's machine a
//! helper call costs more than copying a kilobyte, and a sample needs about thirty fields.
//!
//! The buffer is per CPU, and a program can be interrupted on its CPU by another that also takes
//! a sample (a sock_ops callback in process context, e.g. the backlog processed at
//! `release_sock` with softirqs on, by the softirq's callback for another socket). So each CPU
//! has one buffer per nesting level: a program takes the level the CPU is at and puts it back
//! when done, and an interrupting program, which finishes before the interrupted one resumes,
//! takes the next.

use core::ffi::c_void;

use aya_ebpf::{helpers::generated::bpf_probe_read_kernel, macros::map, maps::PerCpuArray};
use bbrscope_common::{BitField, CA_PRIV_LEN, FieldSpec, SPAN_BUF};

use crate::config::conf;

const WORDS: usize = SPAN_BUF / 8;
/// Words past the span a read at its last word may touch (the `ca_priv` copy, 13 words, and
/// the second word of a field that crosses a word boundary): their content is never used, the
/// verifier only needs them to be inside the buffer.
const SLACK: usize = CA_PRIV_LEN / 8 + 3;
/// Nesting levels per CPU: process context, softirq, hardirq, NMI.
const LEVELS: u64 = 4;

#[repr(C)]
pub struct Scratch {
    /// The nesting level in use on this CPU (0: none).
    depth: u64,
    levels: [[u64; WORDS + SLACK]; LEVELS as usize],
}

#[map]
static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);

/// The socket's span as read at one instant; gives its level back when dropped.
pub struct Span {
    words: *const u64,
    depth: *mut u64,
    level: u64,
    /// The socket offset of `words[0]`.
    off: u32,
}

impl Span {
    /// Reads the span of socket `sk`; `None` when every level of this CPU is in use (never
    /// expected: sock_ops and these tracepoints nest at most twice). A failed read (a bad
    /// address, which a live socket never is) leaves zeros, as a failed read per field did.
    #[inline(always)]
    pub fn read(sk: u64) -> Option<Span> {
        let s = SCRATCH.get_ptr_mut(0)?;
        // SAFETY: `s` is this CPU's value of the map; programs nesting on this CPU each use the
        // level they took (see the module's comment), so nothing else writes this level until
        // it is put back.
        unsafe {
            let level = (*s).depth;
            if level >= LEVELS {
                return None;
            }
            (*s).depth = level + 1;
            let words = (&raw mut (*s).levels as *mut [u64; WORDS + SLACK]).add(level as usize) as *mut u64;
            let len = conf!(span.len);
            let off = conf!(span.off);
            if len as usize <= SPAN_BUF {
                bpf_probe_read_kernel(words as *mut c_void, len, (sk + off as u64) as *const c_void);
            }
            Some(Span { words, depth: &raw mut (*s).depth, level, off })
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
    pub fn bytes(&self, off: u32, len: u32) -> u64 {
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
    pub fn field(&self, f: FieldSpec) -> u64 {
        if f.len > 0 && f.len <= 8 { self.bytes(f.off, f.len) } else { 0 }
    }

    #[inline(always)]
    pub fn bits(&self, f: BitField) -> u32 {
        let word = self.bytes(f.off, 4) as u32;
        (word >> f.shift) & ((1u32 << f.bits) - 1)
    }

    /// `CA_PRIV_LEN` bytes at socket offset `off` (a multiple of 8: userspace checks), as words.
    #[inline(always)]
    pub fn priv_words(&self, off: u32, out: &mut [u64; CA_PRIV_LEN / 8]) {
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
        // SAFETY: the CPU's depth, taken in `read`; programs this one interrupted resume only
        // after it ends, and those that interrupted it have put their levels back.
        unsafe { *self.depth = self.level };
    }
}

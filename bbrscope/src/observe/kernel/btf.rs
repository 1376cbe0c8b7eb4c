//! A small reader for the kernel's BTF (BPF Type Format): just enough to find struct member
//! offsets (through anonymous unions and into bitfields), enum names and tracepoint prototypes.
//!
//! Rust eBPF gets no CO-RE relocations, so bbrscope resolves every kernel layout here, from the
//! running kernel, and hands the offsets to its programs. Format: Documentation/bpf/btf.rst.

use std::{collections::HashMap, path::Path};

use anyhow::{Context as _, Result, bail, ensure};

const MAGIC: u16 = 0xeb9f;

pub(crate) const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// SLUB's caches in sysfs (object sizes of the running kernel).
pub(crate) const SLAB: &str = "/sys/kernel/slab";

#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) ty: u32,
    pub(crate) bit_offset: u32,
    /// Non-zero for bitfields.
    pub(crate) bitfield_size: u32,
}

#[derive(Debug, Clone)]
pub(crate) enum Type {
    Void,
    Int {
        size: u32,
    },
    Ptr {
        target: u32,
    },
    Array {
        elem: u32,
        len: u32,
    },
    Struct {
        size: u32,
        members: Vec<Member>,
    },
    Union {
        size: u32,
        members: Vec<Member>,
    },
    Enum {
        size: u32,
        values: Vec<(String, i64)>,
    },
    /// typedef, volatile, const, restrict, type_tag: all transparent for layout.
    Alias {
        target: u32,
    },
    FuncProto {
        params: Vec<u32>,
    },
    Float {
        size: u32,
    },
    /// fwd, func, var, datasec, decl_tag: irrelevant to layout.
    Other,
}

#[derive(Debug)]
pub struct Btf {
    types: Vec<Type>,
    names: Vec<String>,
    by_name: HashMap<String, Vec<u32>>,
    /// The string section; split BTF's offsets continue the base's, so base ++ split is
    /// indexable by either.
    strings: Vec<u8>,
}

/// Where a member sits, relative to the start of the outermost struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub bit_offset: u32,
    /// Width in bits: the bitfield size, or the member type's size * 8.
    pub(crate) bits: u32,
}

impl Location {
    pub(crate) fn byte_offset(&self) -> u32 {
        self.bit_offset / 8
    }
    #[cfg(test)]
    pub(crate) fn is_byte_aligned(&self) -> bool {
        self.bit_offset.is_multiple_of(8) && self.bits.is_multiple_of(8)
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> Result<u32> {
        let b = self.data.get(self.pos..self.pos + 4).context("BTF truncated")?;
        self.pos += 4;
        Ok(u32::from_le_bytes(b.try_into().unwrap()))
    }
    fn skip(&mut self, n: usize) -> Result<()> {
        ensure!(self.pos + n <= self.data.len(), "BTF truncated");
        self.pos += n;
        Ok(())
    }
}

impl Btf {
    /// The running kernel's BTF (`/sys/kernel/btf/vmlinux`, CONFIG_DEBUG_INFO_BTF).
    pub fn kernel() -> Result<Self> {
        Self::from_file(Path::new(VMLINUX), None)
    }

    /// A module's split BTF (`/sys/kernel/btf/<module>`), layered on the kernel's.
    pub(crate) fn with_module(self, module: &str) -> Result<Self> {
        let path = Path::new("/sys/kernel/btf").join(module);
        Self::from_file(&path, Some(self))
    }

    pub(crate) fn from_file(path: &Path, base: Option<Btf>) -> Result<Self> {
        use std::io::Read as _;
        // A kernel's BTF is a few MB; reading stops beyond this, so that a device or a wrong
        // file (e.g. /dev/zero) cannot fill memory.
        const MAX_BTF_BYTES: u64 = 256 << 20;
        let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
        let mut data = Vec::new();
        file.take(MAX_BTF_BYTES + 1).read_to_end(&mut data).with_context(|| format!("reading {}", path.display()))?;
        ensure!(
            data.len() as u64 <= MAX_BTF_BYTES,
            "{} is larger than any kernel's BTF (over 256 MiB)",
            path.display()
        );
        Self::parse(&data, base).with_context(|| format!("parsing BTF in {}", path.display()))
    }

    /// Parses raw BTF; with `base`, `data` is split BTF whose type ids and string offsets
    /// continue the base's.
    pub fn parse(data: &[u8], base: Option<Btf>) -> Result<Self> {
        ensure!(data.len() >= 24, "too short for a BTF header");
        let magic = u16::from_le_bytes([data[0], data[1]]);
        if magic != MAGIC {
            bail!("not little-endian BTF (magic {magic:#x})");
        }
        let mut h = Reader { data, pos: 4 };
        let hdr_len = h.u32()? as usize;
        let (type_off, type_len) = (h.u32()? as usize, h.u32()? as usize);
        let (str_off, str_len) = (h.u32()? as usize, h.u32()? as usize);
        let types_bytes =
            data.get(hdr_len + type_off..hdr_len + type_off + type_len).context("type section out of range")?;
        let strings =
            data.get(hdr_len + str_off..hdr_len + str_off + str_len).context("string section out of range")?;

        let (mut types, mut names, mut all_strings) = match base {
            Some(b) => (b.types, b.names, b.strings),
            None => (vec![Type::Void], vec![String::new()], Vec::new()),
        };
        all_strings.extend_from_slice(strings);
        let string_at = |off: u32| -> String {
            let s = all_strings.get(off as usize..).unwrap_or_default();
            let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).into_owned()
        };

        let mut r = Reader { data: types_bytes, pos: 0 };
        while r.pos < types_bytes.len() {
            let name_off = r.u32()?;
            let info = r.u32()?;
            let size_or_type = r.u32()?;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let ty = match kind {
                1 => {
                    r.skip(4)?;
                    Type::Int { size: size_or_type }
                }
                2 => Type::Ptr { target: size_or_type },
                3 => {
                    let elem = r.u32()?;
                    let _index = r.u32()?;
                    let len = r.u32()?;
                    Type::Array { elem, len }
                }
                4 | 5 => {
                    let mut members = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let m_name = r.u32()?;
                        let m_ty = r.u32()?;
                        let off = r.u32()?;
                        let (bit_offset, bitfield_size) =
                            if kind_flag { (off & 0xff_ffff, off >> 24) } else { (off, 0) };
                        members.push(Member { name: string_at(m_name), ty: m_ty, bit_offset, bitfield_size });
                    }
                    if kind == 4 {
                        Type::Struct { size: size_or_type, members }
                    } else {
                        Type::Union { size: size_or_type, members }
                    }
                }
                6 => {
                    let mut values = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let n = r.u32()?;
                        let v = i64::from(r.u32()? as i32);
                        values.push((string_at(n), v));
                    }
                    Type::Enum { size: size_or_type, values }
                }
                19 => {
                    let mut values = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let n = r.u32()?;
                        let lo = u64::from(r.u32()?);
                        let hi = u64::from(r.u32()?);
                        values.push((string_at(n), (hi << 32 | lo) as i64));
                    }
                    Type::Enum { size: size_or_type, values }
                }
                8..=11 | 18 => Type::Alias { target: size_or_type },
                13 => {
                    let mut params = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let _name = r.u32()?;
                        params.push(r.u32()?);
                    }
                    Type::FuncProto { params }
                }
                16 => Type::Float { size: size_or_type },
                7 | 12 => Type::Other,
                14 | 17 => {
                    r.skip(4)?;
                    Type::Other
                }
                15 => {
                    r.skip(12 * vlen)?;
                    Type::Other
                }
                k => bail!("unknown BTF kind {k}"),
            };
            types.push(ty);
            names.push(string_at(name_off));
        }
        let mut by_name: HashMap<String, Vec<u32>> = HashMap::new();
        for (id, name) in names.iter().enumerate() {
            if !name.is_empty() {
                by_name.entry(name.clone()).or_default().push(id as u32);
            }
        }
        Ok(Btf { types, names, by_name, strings: all_strings })
    }

    pub(crate) fn get(&self, id: u32) -> Option<&Type> {
        self.types.get(id as usize)
    }

    /// The struct (not a forward declaration) called `name`.
    pub(crate) fn struct_id(&self, name: &str) -> Option<u32> {
        self.by_name.get(name)?.iter().copied().find(|&id| matches!(self.types[id as usize], Type::Struct { .. }))
    }

    /// Follows typedefs and modifiers.
    pub(crate) fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.types.get(id as usize) {
                Some(Type::Alias { target }) => id = *target,
                _ => break,
            }
        }
        id
    }

    pub(crate) fn size_of(&self, id: u32) -> Option<u32> {
        match self.get(self.resolve(id))? {
            Type::Int { size }
            | Type::Struct { size, .. }
            | Type::Union { size, .. }
            | Type::Enum { size, .. }
            | Type::Float { size } => Some(*size),
            Type::Ptr { .. } => Some(8),
            Type::Array { elem, len } => Some(self.size_of(*elem)? * len),
            _ => None,
        }
    }

    /// Whether this BTF describes the running kernel, as far as the kernel tells without BTF of
    /// its own: SLUB's sysfs (`<slab_root>/TCP/object_size`, ...) gives the exact size of the
    /// objects of each socket cache, which is the `sizeof` of its struct in the kernel that runs.
    /// A BTF of another build almost always differs in one of them (two builds of 6.18 here
    /// agree on `tcp_sock` and differ on `tcp6_sock`); without this check every offset read from
    /// it would be silently wrong (zeros and garbage, not an error). A cache merged with others
    /// (a symlink) may hold larger objects, so it is skipped; so is a struct this BTF lacks
    /// (built as a module), except `tcp_sock`. `Ok(false)` when the kernel says nothing.
    pub(crate) fn check_socket_sizes(&self, slab_root: &Path) -> Result<bool, String> {
        // The caches proto_register() makes with the protocol's `obj_size`. Not every cache is
        // its struct's size: 7.3's `sock_inode_cache` holds 768-byte objects for a 704-byte
        // `socket_alloc` (found by the kernel matrix).
        const CACHES: [(&str, &str); 4] = [
            ("TCP", "tcp_sock"),
            ("TCPv6", "tcp6_sock"),
            ("request_sock_TCP", "tcp_request_sock"),
            ("tw_sock_TCP", "tcp_timewait_sock"),
        ];
        let mut checked = false;
        for (cache, strukt) in CACHES {
            let dir = slab_root.join(cache);
            if dir.is_symlink() {
                continue;
            }
            let file = dir.join("object_size");
            let Some(kernel) = std::fs::read_to_string(&file).ok().and_then(|s| s.trim().parse::<u32>().ok()) else {
                continue;
            };
            let here = self.struct_id(strukt).and_then(|id| self.size_of(id));
            match here {
                Some(size) if size == kernel => checked = true,
                Some(size) => {
                    return Err(format!(
                        "struct {strukt} is {size} bytes in it but {kernel} in the running kernel ({})",
                        file.display()
                    ));
                }
                None if strukt == "tcp_sock" => return Err("it has no struct tcp_sock".into()),
                None => {}
            }
        }
        Ok(checked)
    }

    /// Finds `path` (dot-separated member names) inside struct `strukt`. Each step searches
    /// through anonymous struct/union members, and stepping into an array selects element 0, so
    /// `rtt_min.s.v` names the current minimum of a `struct minmax`; a step `name[N]`
    /// names element N of the array `name` (`chrono_stat[2]`), and fails past its end.
    pub fn member(&self, strukt: &str, path: &str) -> Option<Location> {
        let mut ty = self.struct_id(strukt)?;
        let mut bit_offset = 0;
        let mut loc = None;
        for step in path.split('.') {
            ty = self.resolve(ty);
            while let Some(Type::Array { elem, .. }) = self.get(ty) {
                ty = self.resolve(*elem);
            }
            let (name, index) = match step.strip_suffix(']').and_then(|s| s.split_once('[')) {
                Some((name, i)) => (name, Some(i.parse::<u32>().ok()?)),
                None => (step, None),
            };
            let (off, m) = self.find_member(ty, name)?;
            bit_offset += off;
            ty = m.ty;
            let bits = match index {
                Some(i) => {
                    let Type::Array { elem, len } = self.get(self.resolve(ty))? else { return None };
                    let elem_bits = self.size_of(*elem)? * 8;
                    if i >= *len {
                        return None;
                    }
                    bit_offset += i * elem_bits;
                    ty = *elem;
                    elem_bits
                }
                None if m.bitfield_size != 0 => m.bitfield_size,
                None => self.size_of(m.ty)? * 8,
            };
            loc = Some(Location { bit_offset, bits });
        }
        loc
    }

    /// The type id of the member at `path` (see [`Btf::member`]).
    #[cfg(test)]
    pub(crate) fn member_type(&self, strukt: &str, path: &str) -> Option<u32> {
        let mut ty = self.struct_id(strukt)?;
        for step in path.split('.') {
            ty = self.resolve(ty);
            while let Some(Type::Array { elem, .. }) = self.get(ty) {
                ty = self.resolve(*elem);
            }
            ty = self.find_member(ty, step)?.1.ty;
        }
        Some(ty)
    }

    fn find_member(&self, ty: u32, name: &str) -> Option<(u32, &Member)> {
        let (Type::Struct { members, .. } | Type::Union { members, .. }) = self.get(ty)? else { return None };
        for m in members {
            if m.name == name {
                return Some((m.bit_offset, m));
            }
        }
        for m in members.iter().filter(|m| m.name.is_empty()) {
            if let Some((off, found)) = self.find_member(self.resolve(m.ty), name) {
                return Some((m.bit_offset + off, found));
            }
        }
        None
    }

    /// The enumerators of `enum name`.
    pub(crate) fn enum_values(&self, name: &str) -> Option<&[(String, i64)]> {
        self.by_name.get(name)?.iter().find_map(|&id| match &self.types[id as usize] {
            Type::Enum { values, .. } => Some(values.as_slice()),
            _ => None,
        })
    }

    /// Number of arguments of tracepoint `name` (from the `btf_trace_<name>` typedef the kernel
    /// declares for every tracepoint), or `None` when the kernel has no such tracepoint.
    pub fn tracepoint_args(&self, name: &str) -> Option<usize> {
        let id = *self.by_name.get(&format!("btf_trace_{name}"))?.first()?;
        let Type::Ptr { target } = self.get(self.resolve(id))? else { return None };
        let Type::FuncProto { params } = self.get(self.resolve(*target))? else { return None };
        // The first parameter is the tracepoint's private data pointer, not a tracepoint argument.
        Some(params.len().saturating_sub(1))
    }
}

/// Writes BTF blobs for tests: the inverse of [`Btf::parse`], kind by kind.
#[cfg(test)]
pub(crate) mod build {
    pub(crate) struct Builder {
        types: Vec<u8>,
        strings: Vec<u8>,
        next_id: u32,
    }

    impl Default for Builder {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Builder {
        pub(crate) fn new() -> Self {
            Builder { types: Vec::new(), strings: vec![0], next_id: 1 }
        }

        /// Split BTF continuing `base`'s ids and strings.
        pub(crate) fn split(base_types: u32, base_str_len: u32) -> Self {
            Builder { types: Vec::new(), strings: vec![0; base_str_len as usize], next_id: base_types + 1 }
        }

        fn str(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let off = self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            off
        }

        fn push(&mut self, name: &str, kind: u32, vlen: u32, kind_flag: bool, size_or_type: u32, extra: &[u32]) -> u32 {
            let name_off = self.str(name);
            let info = (kind << 24) | vlen | if kind_flag { 1 << 31 } else { 0 };
            for w in [name_off, info, size_or_type].iter().chain(extra) {
                self.types.extend_from_slice(&w.to_le_bytes());
            }
            self.next_id += 1;
            self.next_id - 1
        }

        pub(crate) fn int(&mut self, name: &str, size: u32) -> u32 {
            self.push(name, 1, 0, false, size, &[size * 8])
        }

        pub(crate) fn ptr(&mut self, target: u32) -> u32 {
            self.push("", 2, 0, false, target, &[])
        }

        pub(crate) fn array(&mut self, elem: u32, len: u32) -> u32 {
            self.push("", 3, 0, false, 0, &[elem, elem, len])
        }

        /// Members as (name, type, bit offset, bitfield size or 0).
        pub(crate) fn strukt(&mut self, name: &str, size: u32, members: &[(&str, u32, u32, u32)]) -> u32 {
            self.composite(4, name, size, members)
        }

        pub(crate) fn union(&mut self, name: &str, size: u32, members: &[(&str, u32, u32, u32)]) -> u32 {
            self.composite(5, name, size, members)
        }

        fn composite(&mut self, kind: u32, name: &str, size: u32, members: &[(&str, u32, u32, u32)]) -> u32 {
            let bitfields = members.iter().any(|m| m.3 != 0);
            let mut extra = Vec::new();
            for &(n, ty, off, bits) in members {
                extra.extend([self.str(n), ty, if bitfields { bits << 24 | off } else { off }]);
            }
            self.push(name, kind, members.len() as u32, bitfields, size, &extra)
        }

        pub(crate) fn enm(&mut self, name: &str, values: &[(&str, i32)]) -> u32 {
            let mut extra = Vec::new();
            for &(n, v) in values {
                extra.extend([self.str(n), v as u32]);
            }
            self.push(name, 6, values.len() as u32, false, 4, &extra)
        }

        pub(crate) fn typedef(&mut self, name: &str, target: u32) -> u32 {
            self.push(name, 8, 0, false, target, &[])
        }

        pub(crate) fn func_proto(&mut self, ret: u32, params: &[u32]) -> u32 {
            let extra: Vec<u32> = params.iter().flat_map(|&p| [0, p]).collect();
            self.push("", 13, params.len() as u32, false, ret, &extra)
        }

        pub(crate) fn type_count(&self) -> u32 {
            self.next_id - 1
        }

        pub(crate) fn str_len(&self) -> u32 {
            self.strings.len() as u32
        }

        /// The blob; for split BTF only the strings added after the base's are written.
        pub(crate) fn build(&self, base_str_len: u32) -> Vec<u8> {
            let strings = &self.strings[base_str_len as usize..];
            let mut out = Vec::new();
            out.extend_from_slice(&super::MAGIC.to_le_bytes());
            out.extend_from_slice(&[1, 0]);
            for w in [24u32, 0, self.types.len() as u32, self.types.len() as u32, strings.len() as u32] {
                out.extend_from_slice(&w.to_le_bytes());
            }
            out.extend_from_slice(&self.types);
            out.extend_from_slice(strings);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{build::Builder, *};

    /// A miniature of the kernel's socket types: anonymous unions, nested structs, bitfields,
    /// arrays, typedefs and a tracepoint prototype.
    fn mini_kernel() -> Btf {
        let mut b = Builder::new();
        let u8_ = b.int("u8", 1);
        let u16_ = b.int("u16", 2);
        let u32_ = b.int("u32", 4);
        let be32 = b.typedef("__be32", u32_);
        let addr_pair = b.strukt("", 8, &[("skc_daddr", be32, 0, 0), ("skc_rcv_saddr", be32, 32, 0)]);
        let addrpair_union = b.union("", 8, &[("skc_addrpair", u32_, 0, 0), ("", addr_pair, 0, 0)]);
        let sock_common = b.strukt("sock_common", 16, &[("", addrpair_union, 0, 0), ("skc_family", u16_, 64, 0)]);
        let sock = b.strukt("sock", 64, &[("__sk_common", sock_common, 0, 0), ("sk_pacing_rate", u32_, 256, 0)]);
        let sample = b.strukt("minmax_sample", 8, &[("t", u32_, 0, 0), ("v", u32_, 32, 0)]);
        let samples = b.array(sample, 3);
        let minmax = b.strukt("minmax", 24, &[("s", samples, 0, 0)]);
        b.strukt(
            "tcp_sock",
            256,
            &[
                ("inet_conn", sock, 0, 0),
                ("rtt_min", minmax, 64 * 8, 0),
                ("icsk_ca_state", u8_, 100 * 8 + 3, 5),
                ("is_cwnd_limited", u8_, 100 * 8 + 8, 1),
            ],
        );
        b.enm("bbr_mode", &[("BBR_STARTUP", 0), ("BBR_DRAIN", 1)]);
        let void_ptr = b.ptr(0);
        let sock_ptr = b.ptr(sock);
        let proto = b.func_proto(0, &[void_ptr, sock_ptr, u32_]);
        let fn_ptr = b.ptr(proto);
        b.typedef("btf_trace_tcp_cong_state_set", fn_ptr);
        Btf::parse(&b.build(0), None).unwrap()
    }

    #[test]
    fn socket_sizes_are_checked_against_the_kernels_slab() {
        let btf = mini_kernel();
        let slab = tempfile::tempdir().unwrap();
        // No SLUB sysfs: nothing to compare with.
        assert_eq!(btf.check_socket_sizes(slab.path()), Ok(false));
        std::fs::create_dir(slab.path().join("TCP")).unwrap();
        std::fs::write(slab.path().join("TCP/object_size"), "256\n").unwrap();
        assert_eq!(btf.check_socket_sizes(slab.path()), Ok(true));
        std::fs::write(slab.path().join("TCP/object_size"), "2304\n").unwrap();
        let err = btf.check_socket_sizes(slab.path()).unwrap_err();
        assert!(err.starts_with("struct tcp_sock is 256 bytes in it but 2304 in the running kernel"), "{err}");
        // The mini kernel has no tcp6_sock (IPv6 as a module): not a mismatch.
        std::fs::create_dir(slab.path().join("TCPv6")).unwrap();
        std::fs::write(slab.path().join("TCPv6/object_size"), "2432\n").unwrap();
        std::fs::write(slab.path().join("TCP/object_size"), "256\n").unwrap();
        assert_eq!(btf.check_socket_sizes(slab.path()), Ok(true));
        // A merged cache (a symlink to the cache it shares) is not compared.
        std::fs::remove_dir_all(slab.path().join("TCP")).unwrap();
        std::fs::create_dir(slab.path().join(":A-0002304")).unwrap();
        std::fs::write(slab.path().join(":A-0002304/object_size"), "2304\n").unwrap();
        std::os::unix::fs::symlink(":A-0002304", slab.path().join("TCP")).unwrap();
        assert_eq!(btf.check_socket_sizes(slab.path()), Ok(false));
    }

    #[test]
    fn finds_members_through_anonymous_unions_and_nesting() {
        let btf = mini_kernel();
        assert_eq!(btf.member("sock_common", "skc_rcv_saddr"), Some(Location { bit_offset: 32, bits: 32 }));
        assert_eq!(btf.member("sock", "__sk_common.skc_family"), Some(Location { bit_offset: 64, bits: 16 }));
        assert_eq!(btf.member("tcp_sock", "inet_conn.sk_pacing_rate").unwrap().byte_offset(), 32);
        assert_eq!(btf.member("sock", "__sk_common.nope"), None);
        assert_eq!(btf.member("nope", "x"), None);
    }

    #[test]
    fn steps_into_arrays_and_reads_bitfields() {
        let btf = mini_kernel();
        // rtt_min.s[0].v
        assert_eq!(btf.member("tcp_sock", "rtt_min.s.v"), Some(Location { bit_offset: 64 * 8 + 32, bits: 32 }));
        // An element by index (each `struct minmax_sample` is 8 bytes), and none past the end.
        assert_eq!(
            btf.member("tcp_sock", "rtt_min.s[2].v"),
            Some(Location { bit_offset: (64 + 16) * 8 + 32, bits: 32 })
        );
        assert_eq!(btf.member("tcp_sock", "rtt_min.s[3].v"), None);
        assert_eq!(btf.member("tcp_sock", "rtt_min.s[x].v"), None);
        // Indexing what is not an array finds nothing.
        assert_eq!(btf.member("tcp_sock", "icsk_ca_state[0]"), None);
        let state = btf.member("tcp_sock", "icsk_ca_state").unwrap();
        assert_eq!((state.bit_offset, state.bits, state.is_byte_aligned()), (803, 5, false));
        assert_eq!(btf.size_of(btf.member_type("tcp_sock", "rtt_min").unwrap()), Some(24));
    }

    #[test]
    fn enums_and_tracepoint_prototypes() {
        let btf = mini_kernel();
        assert_eq!(btf.enum_values("bbr_mode").unwrap()[1], ("BBR_DRAIN".to_string(), 1));
        assert_eq!(btf.tracepoint_args("tcp_cong_state_set"), Some(2));
        assert_eq!(btf.tracepoint_args("tcp_no_such_tracepoint"), None);
    }

    #[test]
    fn split_btf_continues_the_base() {
        let mut base = Builder::new();
        let u32_ = base.int("u32", 4);
        base.strukt("tcp_sock", 8, &[("snd_cwnd", u32_, 0, 0)]);
        let (count, str_len) = (base.type_count(), base.str_len());
        let base_btf = Btf::parse(&base.build(0), None).unwrap();

        let mut module = Builder::split(count, str_len);
        module.strukt("bbr", 8, &[("min_rtt_us", u32_, 0, 0), ("full_bw", u32_, 32, 0)]);
        let btf = Btf::parse(&module.build(str_len), Some(base_btf)).unwrap();
        assert_eq!(btf.member("bbr", "full_bw"), Some(Location { bit_offset: 32, bits: 32 }));
        assert_eq!(btf.member("tcp_sock", "snd_cwnd"), Some(Location { bit_offset: 0, bits: 32 }));
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(b"not btf at all, clearly not", None).is_err());
        assert!(
            Btf::parse(&[0x9f, 0xeb, 1, 0, 24, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 100, 0, 0, 0, 4, 0, 0, 0], None)
                .is_err()
        );
    }
}

//! A small reader for the kernel's BTF (BPF Type Format): just enough to find struct member
//! offsets (through anonymous unions and into bitfields), enum names and tracepoint prototypes.
//!
//! Rust eBPF gets no CO-RE relocations, so bbrscope resolves every kernel layout here, from the
//! running kernel, and hands the offsets to its programs. Format: Documentation/bpf/btf.rst.

use std::{collections::HashMap, path::Path};

use anyhow::{Context as _, Result, bail, ensure};

const MAGIC: u16 = 0xeb9f;

pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub ty: u32,
    pub bit_offset: u32,
    /// Non-zero for bitfields.
    pub bitfield_size: u32,
}

#[derive(Debug, Clone)]
pub enum Type {
    Void,
    Int { size: u32 },
    Ptr { target: u32 },
    Array { elem: u32, len: u32 },
    Struct { size: u32, members: Vec<Member> },
    Union { size: u32, members: Vec<Member> },
    Enum { size: u32, values: Vec<(String, i64)> },
    /// typedef, volatile, const, restrict, type_tag: all transparent for layout.
    Alias { target: u32 },
    FuncProto { params: Vec<u32> },
    Float { size: u32 },
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
    pub bits: u32,
}

impl Location {
    pub fn byte_offset(&self) -> u32 {
        self.bit_offset / 8
    }
    pub fn is_byte_aligned(&self) -> bool {
        self.bit_offset % 8 == 0 && self.bits % 8 == 0
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
    pub fn with_module(self, module: &str) -> Result<Self> {
        let path = Path::new("/sys/kernel/btf").join(module);
        Self::from_file(&path, Some(self))
    }

    pub fn from_file(path: &Path, base: Option<Btf>) -> Result<Self> {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
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
                        let v = r.u32()? as i32 as i64;
                        values.push((string_at(n), v));
                    }
                    Type::Enum { size: size_or_type, values }
                }
                19 => {
                    let mut values = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let n = r.u32()?;
                        let lo = r.u32()? as u64;
                        let hi = r.u32()? as u64;
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

    pub fn get(&self, id: u32) -> Option<&Type> {
        self.types.get(id as usize)
    }

    /// The struct (not a forward declaration) called `name`.
    pub fn struct_id(&self, name: &str) -> Option<u32> {
        self.by_name
            .get(name)?
            .iter()
            .copied()
            .find(|&id| matches!(self.types[id as usize], Type::Struct { .. }))
    }

    /// Follows typedefs and modifiers.
    pub fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.types.get(id as usize) {
                Some(Type::Alias { target }) => id = *target,
                _ => break,
            }
        }
        id
    }

    pub fn size_of(&self, id: u32) -> Option<u32> {
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

    /// Finds `path` (dot-separated member names) inside struct `strukt`. Each step searches
    /// through anonymous struct/union members, and stepping into an array selects element 0, so
    /// `rtt_min.s.v` names the current minimum of a `struct minmax`.
    pub fn member(&self, strukt: &str, path: &str) -> Option<Location> {
        let mut ty = self.struct_id(strukt)?;
        let mut bit_offset = 0;
        let mut loc = None;
        for step in path.split('.') {
            ty = self.resolve(ty);
            while let Some(Type::Array { elem, .. }) = self.get(ty) {
                ty = self.resolve(*elem);
            }
            let (off, m) = self.find_member(ty, step)?;
            bit_offset += off;
            let bits = if m.bitfield_size != 0 { m.bitfield_size } else { self.size_of(m.ty)? * 8 };
            loc = Some(Location { bit_offset, bits });
            ty = m.ty;
        }
        loc
    }

    /// The type id of the member at `path` (see [`Btf::member`]).
    pub fn member_type(&self, strukt: &str, path: &str) -> Option<u32> {
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
        let members = match self.get(ty)? {
            Type::Struct { members, .. } | Type::Union { members, .. } => members,
            _ => return None,
        };
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
    pub fn enum_values(&self, name: &str) -> Option<&[(String, i64)]> {
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

    pub fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map(String::as_str).unwrap_or("")
    }
}

//! A kernel name — a congestion control algorithm (`TCP_CA_NAME_MAX`) or a task's `comm`
//! (`TASK_COMM_LEN`), both at most 16 bytes — held inline. Every record names its flow's
//! algorithm and every flow its owner's command; at thousands of flows a second, a `String` for
//! each was an allocation and a free per name per copy (the decoder, the flow table, its list of
//! algorithms, the sinks). This one is `Copy`.

use std::{borrow::Borrow, fmt, hash, ops::Deref};

use bbrscope_common::CC_NAME_LEN;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// At most [`CC_NAME_LEN`] bytes of UTF-8; longer text is cut at a character boundary.
#[derive(Clone, Copy, Default)]
pub struct Name {
    len: u8,
    bytes: [u8; CC_NAME_LEN],
}

impl Name {
    /// A name as the kernel keeps it: up to the first NUL. Bytes that are not UTF-8 become
    /// U+FFFD, as `String::from_utf8_lossy` made them (cut to fit).
    pub(crate) fn from_kernel(raw: &[u8; CC_NAME_LEN]) -> Name {
        let end = raw.iter().position(|&b| b == 0).unwrap_or(CC_NAME_LEN);
        match std::str::from_utf8(&raw[..end]) {
            Ok(s) => Name::new(s),
            Err(_) => Name::new(&String::from_utf8_lossy(&raw[..end])),
        }
    }

    pub(crate) fn new(s: &str) -> Name {
        let mut n = s.len().min(CC_NAME_LEN);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        let mut bytes = [0; CC_NAME_LEN];
        bytes[..n].copy_from_slice(&s.as_bytes()[..n]);
        Name { len: n as u8, bytes }
    }

    pub fn as_str(&self) -> &str {
        // Only `new` fills the bytes: a whole `&str`'s prefix cut at a character boundary.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or_default()
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name::new(s)
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

/// As the `str`, so that maps keyed by `Name` can be looked up by `&str` (`Borrow`).
impl hash::Hash for Name {
    fn hash<H: hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Name::new(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_name_ends_at_its_first_nul_or_at_16_bytes() {
        let mut raw = [0u8; CC_NAME_LEN];
        raw[..3].copy_from_slice(b"bbr");
        assert_eq!(Name::from_kernel(&raw), "bbr");
        assert_eq!(Name::from_kernel(&[b'x'; CC_NAME_LEN]).len(), CC_NAME_LEN);
        assert_eq!(Name::from_kernel(&[0; CC_NAME_LEN]), "");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced_and_long_text_is_cut_whole() {
        let mut raw = [0u8; CC_NAME_LEN];
        raw[..4].copy_from_slice(&[b'a', 0xff, b'b', 0]);
        assert_eq!(Name::from_kernel(&raw), "a\u{fffd}b");
        // 15 bytes of ASCII then a 3-byte character: the character does not fit, so it goes.
        assert_eq!(Name::new("abcdefghijklmno€").as_str(), "abcdefghijklmno");
        assert_eq!(serde_json::to_string(&Name::new("a\"b")).unwrap(), r#""a\"b""#);
        assert_eq!(serde_json::from_str::<Name>(r#""cubic""#).unwrap(), "cubic");
    }
}

//! Which BBR the kernel runs. Every version registers as "bbr" (Google's v2 alpha as "bbr2"),
//! so the name says nothing; the private state says everything: mainline v1's `struct bbr` has
//! the long-term policer sampler (`lt_bw`) and no in-flight bounds, v2 added `inflight_hi` /
//! `bw_lo` (and kept `lt_bw`), v3 dropped `lt_bw` and added `full_bw_now`. The BTF of the kernel
//! (BBR built in) or of the `tcp_bbr` module says which layout is loaded — no version string
//! needed, none exists.

use serde::Serialize;

use super::btf::Btf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Version {
    /// Mainline Linux's net/ipv4/tcp_bbr.c (2016 onward).
    V1,
    /// Google's BBRv2 alpha (github.com/google/bbr, v2alpha branch).
    V2,
    /// Google's BBRv3 (github.com/google/bbr, v3 branch; IETF draft-ietf-ccwg-bbr).
    V3,
}

impl Version {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
            Version::V3 => "v3",
        }
    }
}

/// What is known of the kernel's BBR, and how it is known.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct BbrImpl {
    /// Null when it cannot be told (not loaded, no BTF, or a layout none of the known ones).
    pub(crate) version: Option<Version>,
    /// The evidence, or why there is none, in words.
    pub(crate) how: String,
}

impl BbrImpl {
    /// "v1 (mainline: struct bbr has lt_bw, no inflight_hi; built in)" or "unknown (why)".
    pub(crate) fn describe(&self) -> String {
        match self.version {
            Some(v) => format!("{} ({})", v.label(), self.how),
            None => format!("unknown ({})", self.how),
        }
    }
}

/// The running kernel's BBR, read from its BTF (never fails: what is missing is said).
pub(crate) fn running() -> BbrImpl {
    let unknown = |how: String| BbrImpl { version: None, how };
    let registered = crate::sys::cc::available().unwrap_or_default();
    if !registered.iter().any(|a| a == "bbr" || a == "bbr2") {
        return unknown("BBR is not loaded: modprobe tcp_bbr".into());
    }
    let kernel = match Btf::kernel() {
        Ok(b) => b,
        Err(e) => return unknown(format!("no kernel BTF to read its layout from: {e:#}")),
    };
    if kernel.struct_id("bbr").is_some() {
        return classify(&kernel, "built in");
    }
    for module in ["tcp_bbr", "tcp_bbr2"] {
        if std::path::Path::new("/sys/kernel/btf").join(module).exists() {
            return match kernel.with_module(module) {
                Ok(b) => classify(&b, &format!("module {module}")),
                Err(e) => unknown(format!("{e:#}")),
            };
        }
    }
    unknown("the BBR module has no BTF (CONFIG_DEBUG_INFO_BTF_MODULES)".into())
}

/// The version whose `struct bbr` this BTF holds; `source` says where the BTF came from.
pub(crate) fn classify(btf: &Btf, source: &str) -> BbrImpl {
    if btf.struct_id("bbr").is_none() {
        return BbrImpl { version: None, how: format!("no struct bbr in the BTF of {source}") };
    }
    let has = |m: &str| btf.member("bbr", m).is_some();
    let (version, evidence) = match (has("lt_bw"), has("inflight_hi"), has("full_bw_now")) {
        (true, false, _) => (Some(Version::V1), "mainline: struct bbr has lt_bw, no inflight_hi"),
        (true, true, _) => (Some(Version::V2), "struct bbr has inflight_hi and lt_bw"),
        (false, true, true) => (Some(Version::V3), "struct bbr has inflight_hi and full_bw_now, no lt_bw"),
        _ => (None, "struct bbr matches none of the known layouts"),
    };
    BbrImpl { version, how: format!("{evidence}; {source}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::kernel::btf::build::Builder;

    fn bbr_with(members: &[&str]) -> Btf {
        let mut b = Builder::new();
        let u32_ = b.int("u32", 4);
        let fields: Vec<(&str, u32, u32, u32)> =
            members.iter().enumerate().map(|(i, m)| (*m, u32_, i as u32 * 32, 0)).collect();
        b.strukt("bbr", members.len() as u32 * 4, &fields);
        Btf::parse(&b.build(0), None).unwrap()
    }

    /// The three layouts, as their sources declare them (members trimmed to the telling ones).
    #[test]
    fn each_layout_is_named_for_its_version() {
        let v = |m: &[&str]| classify(&bbr_with(m), "built in").version;
        assert_eq!(v(&["min_rtt_us", "lt_bw", "lt_last_lost"]), Some(Version::V1));
        assert_eq!(v(&["min_rtt_us", "lt_bw", "inflight_lo", "inflight_hi", "bw_lo"]), Some(Version::V2));
        assert_eq!(v(&["min_rtt_us", "full_bw_now", "inflight_lo", "inflight_hi", "bw_lo"]), Some(Version::V3));
        assert_eq!(v(&["min_rtt_us"]), None, "an unknown layout is not guessed");
        let none = classify(&Btf::parse(&Builder::new().build(0), None).unwrap(), "module tcp_bbr");
        assert_eq!(none.describe(), "unknown (no struct bbr in the BTF of module tcp_bbr)");
    }

    /// This kernel's BBR (built in or a module, whichever it has) is mainline v1: the check
    /// reads the real BTF, so a wrong member name or a broken parser fails here.
    #[test]
    fn this_kernels_bbr_is_mainline_v1() {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            return;
        }
        let found = running();
        if found.how.starts_with("BBR is not loaded") {
            return;
        }
        assert_eq!(found.version, Some(Version::V1), "{}", found.describe());
        assert!(found.describe().starts_with("v1 (mainline"), "{}", found.describe());
    }
}

//! How many live TCP connections use each algorithm, from one sock_diag (inet_diag) dump of the
//! calling thread's namespace: the same source `ss -tin` reads.
//!
//! A snapshot rather than the observer's event stream: `status` must answer at once, and loading
//! the observer's programs would see only connections opened after it started.

use std::collections::BTreeMap;

use anyhow::Result;

use crate::sys::sockdiag::{self, CONNECTED};

/// Connections per algorithm name, both address families.
pub(crate) fn flows_by_algorithm() -> Result<BTreeMap<String, u64>> {
    let mut counts = BTreeMap::new();
    for s in sockdiag::dump(CONNECTED, false)? {
        *counts.entry(s.cc.unwrap_or_else(|| "unknown".into())).or_insert(0) += 1;
    }
    Ok(counts)
}

//! Root qdiscs per interface, and re-applying the kernel's default qdisc to interfaces still on
//! it after `net.core.default_qdisc` changed (which only affects qdiscs created later).
//!
//! The kernel creates default qdiscs with handle 0; anything an administrator installs gets a
//! non-zero handle. So handle 0 is how "still on the kernel default" is told from "custom",
//! and custom qdiscs are never touched.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::sys::netlink::{Attrs, NETLINK_ROUTE, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE, Netlink, attrs, cstr};

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWQDISC: u16 = 36;
const RTM_DELQDISC: u16 = 37;
const RTM_GETQDISC: u16 = 38;
const IFLA_IFNAME: u16 = 3;
const TCA_KIND: u16 = 1;
const TC_H_ROOT: u32 = 0xffff_ffff;
const IFINFOMSG_LEN: usize = 16;
const TCMSG_LEN: usize = 20;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RootQdisc {
    pub ifindex: i32,
    pub ifname: String,
    pub kind: String,
    pub handle: u32,
}

impl RootQdisc {
    /// Created by the kernel (handle 0), not by an administrator.
    pub fn is_kernel_default(&self) -> bool {
        self.handle == 0
    }

    /// Whether re-applying the default would change anything: a kernel-made qdisc that is not
    /// already the new kind. `noqueue` (virtual devices) is what the kernel gives queue-less
    /// devices whatever the default, and `mq` holds one default qdisc per hardware queue.
    pub fn needs_reapply(&self, new_default: &str) -> bool {
        self.is_kernel_default() && self.kind != new_default && self.kind != "noqueue"
    }
}

fn tcmsg(ifindex: i32, handle: u32, parent: u32) -> Vec<u8> {
    let mut m = vec![0u8; TCMSG_LEN];
    m[0] = libc::AF_UNSPEC as u8;
    m[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    m[8..12].copy_from_slice(&handle.to_ne_bytes());
    m[12..16].copy_from_slice(&parent.to_ne_bytes());
    m
}

fn link_names(nl: &mut Netlink) -> Result<BTreeMap<i32, String>> {
    let msgs = nl.request(RTM_GETLINK, NLM_F_DUMP, &[0u8; IFINFOMSG_LEN]).context("listing interfaces")?;
    Ok(msgs
        .iter()
        .filter(|m| m.kind == RTM_NEWLINK && m.data.len() >= IFINFOMSG_LEN)
        .filter_map(|m| {
            let index = i32::from_ne_bytes(m.data[4..8].try_into().ok()?);
            let name = attrs(&m.data[IFINFOMSG_LEN..]).find(|(t, _)| *t == IFLA_IFNAME).map(|(_, v)| cstr(v))?;
            Some((index, name))
        })
        .collect())
}

/// The root qdisc of every interface in this namespace.
pub fn roots() -> Result<Vec<RootQdisc>> {
    let mut nl = Netlink::open(NETLINK_ROUTE)?;
    let names = link_names(&mut nl)?;
    let msgs = nl.request(RTM_GETQDISC, NLM_F_DUMP, &tcmsg(0, 0, 0)).context("listing qdiscs")?;
    let mut out: Vec<RootQdisc> = msgs
        .iter()
        .filter(|m| m.kind == RTM_NEWQDISC && m.data.len() >= TCMSG_LEN)
        .filter_map(|m| {
            let ifindex = i32::from_ne_bytes(m.data[4..8].try_into().ok()?);
            let handle = u32::from_ne_bytes(m.data[8..12].try_into().ok()?);
            let parent = u32::from_ne_bytes(m.data[12..16].try_into().ok()?);
            (parent == TC_H_ROOT).then_some(())?;
            let kind = attrs(&m.data[TCMSG_LEN..]).find(|(t, _)| *t == TCA_KIND).map(|(_, v)| cstr(v))?;
            Some(RootQdisc { ifindex, ifname: names.get(&ifindex).cloned().unwrap_or_default(), kind, handle })
        })
        .collect();
    out.sort_by_key(|q| q.ifindex);
    Ok(out)
}

/// Makes the kernel attach its (current) default qdisc to `ifname` again. A kernel-made root
/// qdisc (handle 0) cannot be deleted, so a plain pfifo_fast takes its place for a moment and is
/// then deleted: on deleting a root qdisc the kernel attaches the default, per hardware queue
/// on multi-queue devices, exactly as at boot.
pub fn reapply_default(ifname: &str) -> Result<()> {
    let mut nl = Netlink::open(NETLINK_ROUTE)?;
    let names = link_names(&mut nl)?;
    let ifindex = *names.iter().find(|(_, n)| *n == ifname).with_context(|| format!("no interface {ifname}"))?.0;
    let mut msg = tcmsg(ifindex, 0, TC_H_ROOT);
    let mut a = Attrs::default();
    a.put_str(TCA_KIND, "pfifo_fast");
    msg.extend_from_slice(&a.0);
    nl.request(RTM_NEWQDISC, NLM_F_CREATE | NLM_F_REPLACE, &msg)
        .with_context(|| format!("replacing the root qdisc of {ifname}"))?;
    nl.request(RTM_DELQDISC, 0, &tcmsg(ifindex, 0, TC_H_ROOT))
        .with_context(|| format!("restoring the default root qdisc of {ifname}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(kind: &str, handle: u32) -> RootQdisc {
        RootQdisc { ifindex: 2, ifname: "eth0".into(), kind: kind.into(), handle }
    }

    #[test]
    fn only_kernel_made_qdiscs_are_reapplied() {
        assert!(q("pfifo_fast", 0).needs_reapply("fq"));
        assert!(q("mq", 0).needs_reapply("fq"));
        assert!(!q("fq", 0).needs_reapply("fq"), "already the default");
        assert!(!q("noqueue", 0).needs_reapply("fq"), "virtual device");
        assert!(!q("htb", 0x1_0000).needs_reapply("fq"), "custom qdisc left alone");
        assert!(!q("fq_codel", 0x8001_0000).needs_reapply("fq"));
    }
}

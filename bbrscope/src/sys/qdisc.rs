//! Root qdiscs per interface (for `apply`'s plan and `status`, and the qdisc that sends each
//! device's packets for `advise`'s pacing check), and re-applying the kernel's default qdisc to
//! interfaces still on it after `net.core.default_qdisc` changed (which only affects qdiscs
//! created later).
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
    pub(crate) ifindex: i32,
    pub ifname: String,
    pub kind: String,
    pub(crate) handle: u32,
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

/// One qdisc as the kernel lists it.
struct Listed {
    ifindex: i32,
    handle: u32,
    parent: u32,
    kind: String,
}

/// Every qdisc of this namespace, and the interfaces' names.
fn dump() -> Result<(BTreeMap<i32, String>, Vec<Listed>)> {
    let mut nl = Netlink::open(NETLINK_ROUTE)?;
    let names = link_names(&mut nl)?;
    let msgs = nl.request(RTM_GETQDISC, NLM_F_DUMP, &tcmsg(0, 0, 0)).context("listing qdiscs")?;
    let listed = msgs
        .iter()
        .filter(|m| m.kind == RTM_NEWQDISC && m.data.len() >= TCMSG_LEN)
        .filter_map(|m| {
            Some(Listed {
                ifindex: i32::from_ne_bytes(m.data[4..8].try_into().ok()?),
                handle: u32::from_ne_bytes(m.data[8..12].try_into().ok()?),
                parent: u32::from_ne_bytes(m.data[12..16].try_into().ok()?),
                kind: attrs(&m.data[TCMSG_LEN..]).find(|(t, _)| *t == TCA_KIND).map(|(_, v)| cstr(v))?,
            })
        })
        .collect();
    Ok((names, listed))
}

/// The root qdisc of every interface in this namespace.
pub fn roots() -> Result<Vec<RootQdisc>> {
    let (names, listed) = dump()?;
    let mut out: Vec<RootQdisc> = listed
        .into_iter()
        .filter(|q| q.parent == TC_H_ROOT)
        .map(|q| RootQdisc {
            ifindex: q.ifindex,
            ifname: names.get(&q.ifindex).cloned().unwrap_or_default(),
            kind: q.kind,
            handle: q.handle,
        })
        .collect();
    out.sort_by_key(|q| q.ifindex);
    Ok(out)
}

/// What sends a device's packets: its root qdisc, and where that root only spreads them over
/// hardware queues (mq, mqprio, taprio), the qdiscs of the queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeviceQdisc {
    pub(crate) ifname: String,
    pub(crate) root: String,
    /// The per-queue qdiscs' kinds under a multi-queue root (deduplicated); empty otherwise.
    pub(crate) queues: Vec<String>,
}

impl DeviceQdisc {
    /// Whether fq sends every packet of the device (the root, or every queue's qdisc).
    pub(crate) fn is_fq(&self) -> bool {
        if self.queues.is_empty() { self.root == "fq" } else { self.queues.iter().all(|k| k == "fq") }
    }
}

impl std::fmt::Display for DeviceQdisc {
    /// `noqueue`, `fq_codel`, `mq (fq_codel)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.queues.is_empty() {
            f.write_str(&self.root)
        } else {
            write!(f, "{} ({})", self.root, self.queues.join(", "))
        }
    }
}

/// The qdisc that sends each interface's packets in this namespace, by interface index.
pub(crate) fn senders() -> Result<BTreeMap<i32, DeviceQdisc>> {
    let (names, listed) = dump()?;
    Ok(senders_of(&names, &listed))
}

fn senders_of(names: &BTreeMap<i32, String>, listed: &[Listed]) -> BTreeMap<i32, DeviceQdisc> {
    let mut out = BTreeMap::new();
    for root in listed.iter().filter(|q| q.parent == TC_H_ROOT) {
        let mut queues: Vec<String> = Vec::new();
        if ["mq", "mqprio", "taprio"].contains(&root.kind.as_str()) {
            // A queue's qdisc hangs from the root's handle (major number), minor = queue.
            for q in listed.iter().filter(|q| q.ifindex == root.ifindex && q.parent != TC_H_ROOT) {
                if q.parent >> 16 == root.handle >> 16 && !queues.contains(&q.kind) {
                    queues.push(q.kind.clone());
                }
            }
        }
        let ifname = names.get(&root.ifindex).cloned().unwrap_or_default();
        out.insert(root.ifindex, DeviceQdisc { ifname, root: root.kind.clone(), queues });
    }
    out
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
    fn a_multi_queue_root_is_sent_by_its_queues_qdiscs() {
        let names = BTreeMap::from([(1, "lo".to_string()), (2, "eth0".to_string()), (3, "eth1".to_string())]);
        let l = |ifindex, handle, parent, kind: &str| Listed { ifindex, handle, parent, kind: kind.into() };
        let listed = [
            l(1, 0, TC_H_ROOT, "noqueue"),
            // The kernel's default on a two-queue NIC: `mq 0: root`, `fq 0: parent :1`, `:2`.
            l(2, 0, TC_H_ROOT, "mq"),
            l(2, 0, 1, "fq"),
            l(2, 0, 2, "fq"),
            l(2, 0xffff_0000, 0xffff_fff1, "ingress"),
            // An administrator's mq 1: with fq_codel on one queue.
            l(3, 0x1_0000, TC_H_ROOT, "mq"),
            l(3, 0, 0x1_0001, "fq"),
            l(3, 0, 0x1_0002, "fq_codel"),
        ];
        let s = senders_of(&names, &listed);
        assert_eq!((s[&1].to_string(), s[&1].is_fq()), ("noqueue".into(), false));
        assert_eq!((s[&2].to_string(), s[&2].is_fq()), ("mq (fq)".into(), true));
        assert_eq!((s[&3].to_string(), s[&3].is_fq()), ("mq (fq, fq_codel)".into(), false));
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

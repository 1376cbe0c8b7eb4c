//! Pacing of BBR flows: what paces them, fq or TCP itself, counted per device (never a change).

use std::collections::BTreeMap;

use crate::advise::{
    facts::FlowFacts,
    findings::{Check, Egress, Finding, Settings, Status},
};

/// BBR flows and the qdisc that sends their packets. BBR sets the pace of every packet it sends;
/// fq used to be the only thing that kept that pace, and since Linux 4.13 TCP paces by itself
/// where the qdisc does not (tcp_internal_pacing, an hrtimer per socket; from 4.20 on departure
/// times). So on every kernel bbrscope runs on, BBR is paced with or without fq: the check
/// counts the flows each way and says so, and advises no change for pacing's sake (what fq would
/// save is CPU time in TCP's timers, which the observer does not measure).
pub(super) fn pacing(flows: &[&FlowFacts], s: &Settings) -> Finding {
    let bbr: Vec<&&FlowFacts> = flows.iter().filter(|f| f.is_bbr()).collect();
    let base = Finding::too_few(Check::Pacing, s, bbr.len(), 0);
    if bbr.is_empty() {
        return Finding { evidence: "no flow ran BBR, the algorithm whose model needs pacing".into(), ..base };
    }
    // Per device: its qdisc, and the BBR flows through it.
    let mut devices: BTreeMap<&str, (&Egress, usize)> = BTreeMap::new();
    let mut unknown = 0;
    for f in &bbr {
        match s.egress.get(&f.dst) {
            Some(e) => devices.entry(e.ifname.as_str()).or_insert((e, 0)).1 += 1,
            None => unknown += 1,
        }
    }
    let count = |fq: bool| devices.values().filter(|(e, _)| e.fq == fq).map(|(_, n)| n).sum::<usize>();
    let (with_fq, without_fq) = (count(true), count(false));
    let list = |fq: bool| {
        let v: Vec<String> = devices
            .iter()
            .filter(|(_, (e, _))| e.fq == fq)
            .map(|(name, (e, n))| format!("{name} with {}: {n}", e.qdisc))
            .collect();
        v.join(", ")
    };
    let mut parts = Vec::new();
    if without_fq > 0 {
        parts.push(format!(
            "{without_fq} through devices without fq, which TCP paces itself (Linux 4.13 and later): {}",
            list(false)
        ));
    }
    if with_fq > 0 {
        let them = if with_fq == 1 { "it" } else { "them" };
        parts.push(format!("{with_fq} through fq, which paces {them}: {}", list(true)));
    }
    if unknown > 0 {
        parts.push(format!("{unknown} to peers no route leads to now"));
    }
    let fastest = bbr.iter().filter_map(|f| f.pacing_max_bps).max();
    let mut numbers = BTreeMap::from([
        ("bbr_flows", bbr.len() as f64),
        ("without_fq", without_fq as f64),
        ("with_fq", with_fq as f64),
    ]);
    if let Some(r) = fastest {
        numbers.insert("pacing_rate_max_bps", r as f64);
    }
    let rate = fastest.map(|r| format!(", paced at up to {}", crate::units::fmt_rate(r as f64))).unwrap_or_default();
    Finding {
        status: Status::None,
        numbers,
        evidence: format!(
            "{} BBR flow{}{rate}: {}. BBR's pacing holds either way; fq would take it off TCP's timers, a CPU \
             saving this observer does not measure",
            bbr.len(),
            if bbr.len() == 1 { "" } else { "s" },
            parts.join("; ")
        ),
        ..base
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::advise::checks::tests::{flow, settings};

    #[test]
    fn bbr_is_paced_with_or_without_fq_and_the_devices_are_named() {
        let mut s = settings();
        let e = |ifname: &str, qdisc: &str, fq| Egress { ifname: ifname.into(), qdisc: qdisc.into(), fq };
        let peer = |i: u8| IpAddr::from([198, 18, 0, i]);
        s.egress = BTreeMap::from([
            (peer(1), e("eth0", "mq (fq_codel)", false)),
            (peer(2), e("eth0", "mq (fq_codel)", false)),
            (peer(3), e("eth1", "fq", true)),
        ]);
        let at = |i: u8, cc: &str, pacing: u64| FlowFacts {
            dst: peer(i),
            cc: cc.into(),
            pacing_max_bps: Some(pacing),
            ..flow(1 << 20, 100)
        };
        let flows = [at(1, "bbr", 20_000_000), at(2, "bbr", 50_000_000), at(3, "bbr", 9_000_000), at(4, "bbr", 1)];
        let cubic = at(1, "cubic", 90_000_000);
        let refs: Vec<&FlowFacts> = flows.iter().chain([&cubic]).collect();
        let f = pacing(&refs, &s);
        assert_eq!((f.status, f.flows, f.affected, f.change.as_deref()), (Status::None, 4, 0, None), "{f:?}");
        assert_eq!((f.numbers["without_fq"], f.numbers["with_fq"]), (2.0, 1.0));
        assert_eq!(f.numbers["pacing_rate_max_bps"], 50e6, "BBR's, not CUBIC's");
        for part in [
            "4 BBR flows, paced at up to 50",
            "eth0 with mq (fq_codel): 2",
            "TCP paces itself",
            "eth1 with fq: 1",
            "1 to peers no route",
        ] {
            assert!(f.evidence.contains(part), "{part}: {}", f.evidence);
        }
        assert_eq!(pacing(&[&cubic], &s).status, Status::TooFew);
    }
}

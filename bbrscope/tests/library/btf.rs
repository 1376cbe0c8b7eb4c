//! bbrscope's BTF reader against the running kernel, cross-checked with pahole (dwarves), an
//! independent implementation.

use std::{collections::HashMap, process::Command};

use bbrscope::observe::kernel::{
    btf::Btf,
    layout::{FIELDS, Layout},
};

/// Member name -> (byte offset, bit offset within the byte for bitfields) from `pahole -C`.
fn pahole(strukt: &str) -> HashMap<String, (u32, u32)> {
    let out = Command::new("pahole")
        .args(["-C", strukt, "/sys/kernel/btf/vmlinux"])
        .output()
        .expect("pahole (package dwarves, installed by scripts/setup.sh)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut members = HashMap::new();
    for line in text.lines() {
        // "\tu32   snd_cwnd;   /*  1444     4 */" or "\tu8 icsk_ca_state:5; /*  1248: 0  1 */"
        let Some((decl, comment)) = line.split_once("/*") else { continue };
        let Some(decl) = decl.trim().strip_suffix(';') else { continue };
        // "u32 segs_out __attribute__((__aligned__(64)))": the name comes before the attribute.
        let decl = decl.split(" __attribute__").next().unwrap();
        let Some(name) = decl.split_whitespace().last() else { continue };
        let name = name.split(':').next().unwrap().trim_start_matches('*');
        let name = name.split('[').next().unwrap();
        let nums = comment.trim_end_matches("*/").trim();
        let (byte, bit) = match nums.split_once(':') {
            Some((b, rest)) => (b.trim(), rest.split_whitespace().next().unwrap_or("0")),
            None => (nums.split_whitespace().next().unwrap_or(""), "0"),
        };
        if let (Ok(byte), Ok(bit)) = (byte.parse(), bit.parse()) {
            members.entry(name.to_string()).or_insert((byte, bit));
        }
    }
    assert!(!members.is_empty(), "pahole printed nothing for {strukt}: {}", String::from_utf8_lossy(&out.stderr));
    members
}

#[test]
fn top_level_member_offsets_match_pahole() {
    let btf = Btf::kernel().expect("this machine has kernel BTF");
    for strukt in ["tcp_sock", "sock", "inet_connection_sock", "tcp_congestion_ops"] {
        let reference = pahole(strukt);
        let mut compared = 0;
        for (name, &(byte, bit)) in &reference {
            let Some(loc) = btf.member(strukt, name) else { continue };
            assert_eq!((loc.bit_offset / 8, loc.bit_offset % 8), (byte, bit), "{strukt}.{name}");
            compared += 1;
        }
        // pahole prints function-pointer members in a form this parser skips.
        assert!(compared >= 3, "{strukt}: only {compared} members compared");
    }
}

#[test]
fn every_sampled_field_resolves_on_this_kernel() {
    let btf = Btf::kernel().expect("kernel BTF");
    let layout = Layout::from_btf(&btf).expect("layout");
    assert!(layout.missing.is_empty(), "missing on this kernel: {:?}", layout.missing);
    assert!(layout.cgroup_filter, "6.x kernels attribute sockets to cgroups");
    let tcp = pahole("tcp_sock");
    for (i, (field, strukt, path)) in FIELDS.iter().enumerate() {
        if *strukt == "tcp_sock" && !path.contains('.') {
            // `chrono_stat[2]`: element 2 of a u32 array.
            let (name, index) = match path.strip_suffix(']').and_then(|p| p.split_once('[')) {
                Some((name, i)) => (name, i.parse::<u32>().unwrap()),
                None => (*path, 0),
            };
            let (byte, _) = tcp[name];
            assert_eq!(layout.fields[i].off, byte + 4 * index, "{field:?}");
        }
    }
    // The optional socket members: every one exists on this kernel, at pahole's offset where
    // it is a top-level member (`u32::MAX` would silently turn a feature off: `sk_flags` is a
    // macro for `__sk_common.skc_flags`, which only the BTF path finds).
    let sock = pahole("sock");
    let common = pahole("sock_common");
    let optional = [
        ("cookie", layout.sock.cookie, common["skc_cookie"].0),
        ("sk_err", layout.sock.sk_err, sock["sk_err"].0),
        ("sk_flags", layout.sock.sk_flags, common["skc_flags"].0),
        ("sk_lock", layout.sock.sk_lock_owned.wrapping_sub(4), sock["sk_lock"].0),
        ("prior_cwnd", layout.sock.prior_cwnd, pahole("tcp_sock")["prior_cwnd"].0),
        ("sk_socket", layout.sock.sk_socket, sock["sk_socket"].0),
        ("socket_ino", layout.sock.socket_ino, pahole("socket_alloc")["vfs_inode"].0 + pahole("inode")["i_ino"].0),
    ];
    for (name, ours, theirs) in optional {
        assert_eq!(ours, theirs, "{name}");
    }
    assert!(layout.sock.net != u32::MAX && layout.sock.net_inum != u32::MAX);
    let bbr = layout.bbr.expect("BBR is built into this kernel, so its BTF is there");
    assert!(bbr.mode.is_some() && bbr.bw.is_some() && bbr.pacing_gain.is_some());
    assert_eq!(
        bbr.mode_names.iter().map(|(_, n)| &**n).collect::<Vec<_>>(),
        ["startup", "drain", "probe_bw", "probe_rtt"]
    );
}

#[test]
fn tracepoint_arity_comes_from_btf() {
    let btf = Btf::kernel().expect("kernel BTF");
    assert_eq!(btf.tracepoint_args("tcp_probe"), Some(2));
    assert_eq!(btf.tracepoint_args("inet_sock_set_state"), Some(3));
    let rtx = btf.tracepoint_args("tcp_retransmit_skb").expect("tcp_retransmit_skb");
    assert!(rtx == 2 || rtx == 3, "(sk, skb[, err])");
}

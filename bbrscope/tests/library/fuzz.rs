//! Parsers of outside input against random and mutated input: they may refuse it, never panic,
//! never hang. Seeded, so a failure reproduces; bounded, so the suite stays fast. The kernel's
//! BTF is world-readable: no root needed.

use std::{path::Path, time::Instant};

use bbrscope::{apply::sysctl_d::BootConfig, observe::kernel::btf::Btf, observe::replay, rng::Rng, units};

/// `input` with a few bytes flipped, inserted or removed, or cut short.
fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(4) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, rng.next_u64() as u8);
            }
            2 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.remove(i);
            }
            _ => v.truncate(rng.below(v.len() + 1)),
        }
    }
    v
}

#[test]
fn replay_lines_never_panic() {
    let fixture = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cubic-vs-bbr.ndjson"))
        .expect("fixture");
    let lines: Vec<&str> = fixture.lines().take(200).collect();
    let mut rng = Rng::new(1);
    let start = Instant::now();
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let line = lines[rng.below(lines.len())];
        let m = mutate(&mut rng, line.as_bytes());
        match replay::parse_line(&String::from_utf8_lossy(&m)) {
            Ok(_) => ok += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(ok > 0 && refused > 0, "mutations should sometimes survive and sometimes not ({ok}/{refused})");
    assert!(start.elapsed().as_secs() < 60);
}

#[test]
fn units_never_panic_and_accept_only_sane_values() {
    let alphabet = b"0123456789.eE+-kKmMgGbBiIpPtTsS/ %_xXn";
    let mut rng = Rng::new(2);
    for _ in 0..50_000 {
        let len = rng.below(14);
        let s: String = (0..len).map(|_| alphabet[rng.below(alphabet.len())] as char).collect();
        if let Ok(r) = units::rate(&s) {
            assert!(r.bps > 0, "{s:?} gave a zero rate");
        }
        if let Ok(l) = units::loss(&s) {
            assert!((0.0..1.0).contains(&l), "{s:?} gave loss {l}");
        }
        let _ = units::rtt(&s);
        let _ = units::duration(&s);
        let _ = units::buffer(&s);
    }
}

#[test]
fn sysctl_files_never_panic() {
    let seeds = [
        "net.ipv4.tcp_congestion_control = bbr\n",
        "# comment\n; also\n-net.ipv4.tcp_congestion_control=cubic\n",
        "net/ipv4/tcp_congestion_control = reno\nnet.core.default_qdisc=fq\n",
        "net.ipv4.tcp_congestion_control\n= =\n\n\t  net.ipv4.tcp_congestion_control  =  x y  \n",
    ];
    let mut rng = Rng::new(3);
    for _ in 0..20_000 {
        let seed = seeds[rng.below(seeds.len())];
        let text = mutate(&mut rng, seed.as_bytes());
        let cfg = BootConfig::default()
            .with_dropin(Path::new("/etc/sysctl.d/50-fuzz.conf"), Some(&String::from_utf8_lossy(&text)));
        let _ = cfg.effective("net.ipv4.tcp_congestion_control");
        let _ = cfg.effective("net.core.default_qdisc");
    }
}

#[test]
fn btf_parsing_never_panics_on_damaged_data() {
    let real = std::fs::read("/sys/kernel/btf/vmlinux").expect("kernel BTF");
    // The header and the first types, where damage reaches every later offset.
    let head = &real[..real.len().min(64 << 10)];
    let mut rng = Rng::new(4);
    let start = Instant::now();
    for _ in 0..300 {
        let m = mutate(&mut rng, head);
        let _ = Btf::parse(&m, None);
    }
    assert!(start.elapsed().as_secs() < 60);
    // Garbage of every small size.
    for len in 0..64 {
        let junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        assert!(Btf::parse(&junk, None).is_err());
    }
}

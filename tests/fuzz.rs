//! Parsers of outside input against random and mutated input: they may refuse it, never panic,
//! never hang. Seeded, so a failure reproduces; bounded, so the suite stays fast. (No root needed
//! except to read the kernel's BTF, which the test suite has anyway.)

use std::{path::Path, time::Instant};

use bbrscope::{apply::sysctl_d::BootConfig, demo::units, kernel::btf::Btf, replay};

/// SplitMix64: a small seeded generator, enough to drive mutations reproducibly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// `input` with a few bytes flipped, inserted or removed, or cut short.
    fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut v = input.to_vec();
        for _ in 0..1 + self.below(4) {
            match self.below(4) {
                0 if !v.is_empty() => {
                    let i = self.below(v.len());
                    v[i] ^= 1 << self.below(8);
                }
                1 => {
                    let i = self.below(v.len() + 1);
                    v.insert(i, self.next() as u8);
                }
                2 if !v.is_empty() => {
                    let i = self.below(v.len());
                    v.remove(i);
                }
                _ => v.truncate(self.below(v.len() + 1)),
            }
        }
        v
    }
}

#[test]
fn replay_lines_never_panic() {
    let fixture =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/cubic-vs-bbr.ndjson"))
            .expect("fixture");
    let lines: Vec<&str> = fixture.lines().take(200).collect();
    let mut rng = Rng(1);
    let start = Instant::now();
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let line = lines[rng.below(lines.len())];
        let m = rng.mutate(line.as_bytes());
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
    let mut rng = Rng(2);
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
    let mut rng = Rng(3);
    for _ in 0..20_000 {
        let seed = seeds[rng.below(seeds.len())];
        let text = rng.mutate(seed.as_bytes());
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
    let mut rng = Rng(4);
    let start = Instant::now();
    for _ in 0..300 {
        let m = rng.mutate(head);
        let _ = Btf::parse(&m, None);
    }
    assert!(start.elapsed().as_secs() < 60);
    // Garbage of every small size.
    for len in 0..64 {
        let junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        assert!(Btf::parse(&junk, None).is_err());
    }
}

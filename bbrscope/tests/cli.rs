//! The exit statuses the README promises, one table for every subcommand: 0 for success, help,
//! version and a reader that went away; 2 for a bad argument, a missing privilege, a missing
//! kernel feature or a closed stdout (nothing done); 1 for a runtime failure such as a full disk.
//! Errors are one line on stderr. (Root: some rows load BPF programs; one drops privileges.)

mod common;

use std::{net::TcpListener, os::unix::process::CommandExt as _, process::Stdio};

use common::{bbrscope, closed_pipe, full, require_root};

/// Where a row's standard output goes.
#[derive(Clone, Copy, Debug)]
enum Out {
    Null,
    /// /dev/full: every write fails with ENOSPC.
    Full,
    /// A pipe whose reader has gone: every write fails with EPIPE.
    ClosedPipe,
    /// No descriptor 1 at all (`>&-`).
    Closed,
}

/// How a row is run.
#[derive(Clone, Copy, Debug)]
enum As {
    Root,
    /// uid/gid 65534 (nobody), no capabilities.
    Nobody,
    /// Root without CAP_NET_ADMIN and CAP_SYS_ADMIN: may trace, may not load sock_ops programs.
    RootWithoutNetAdmin,
}

#[test]
fn every_subcommand_exits_as_the_readme_says() {
    require_root();
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_str().unwrap().to_string();
    // A port something already listens on, for the exporter's "address in use".
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    let r = ["--root", root.as_str()];
    #[rustfmt::skip]
    let table: Vec<(Vec<&str>, Out, As, i32, &str)> = vec![
        (vec!["--help"], Out::Null, As::Root, 0, ""),
        (vec!["--version"], Out::Null, As::Root, 0, ""),
        (vec!["status", "--help"], Out::Null, As::Root, 0, ""),
        (vec!["nosuchcommand"], Out::Null, As::Root, 2, "unrecognized subcommand"),
        // Bad arguments, one per subcommand.
        (vec!["stream", "--port", "0"], Out::Null, As::Root, 2, "port 0 matches no TCP flow"),
        (vec!["top", "--interval", "100ms"], Out::Null, As::Root, 2, "without a unit"),
        // A negative number reaches the option's own check (not clap's "unexpected argument").
        (vec!["stream", "--interval", "-1"], Out::Null, As::Root, 2, "'-1' is not an interval: give milliseconds"),
        (vec!["replay", "/no/such/capture.ndjson"], Out::Null, As::Root, 2, "cannot read"),
        (vec!["demo", "--rate", "50"], Out::Null, As::Root, 2, "needs a unit"),
        // Refused up front, not after the emulator's namespaces are made.
        (vec!["demo", "--buffer", "1e12"], Out::Null, As::Root, 2, "holds its queue in memory, at most 256 MiB"),
        (vec!["demo", "--rate", "1gbit", "--rtt", "10s"], Out::Null, As::Root, 2, "give --buffer"),
        (vec!["advise", "--netns", "0"], Out::Null, As::Root, 2, "0 is no namespace's inode number"),
        (vec!["advise", "--netns", "/etc/hostname"], Out::Null, As::Root, 2, "not a network namespace file"),
        (vec!["experiment", "--arms", "cubic"], Out::Null, As::Root, 2, "two arms"),
        (vec!["apply"], Out::Null, As::Root, 2, "<ALGORITHM>"),
        (vec!["apply", "bbr", "--persist", "--no-persist", r[0], r[1]], Out::Null, As::Root, 2, "cannot be used with"),
        (vec!["revert", "--netns", "no-such-ns", r[0], r[1]], Out::Null, As::Root, 2, "no network namespace"),
        (vec!["status", "--bogus"], Out::Null, As::Root, 2, "unexpected argument"),
        (vec!["export", "--listen", "127.0.0.1:99999"], Out::Null, As::Root, 2, "not an address and port"),
        (vec!["export", "--listen", busy.as_str()], Out::Null, As::Root, 2, "in use"),
        (vec!["advise", "--duration", "0"], Out::Null, As::Root, 2, "'0' must be longer than zero"),
        (vec!["advise", "--port", "0"], Out::Null, As::Root, 2, "port 0 matches no TCP flow"),
        (vec!["advise", "--from", "/no/such/capture.ndjson"], Out::Null, As::Root, 2, "cannot read"),
        (vec!["advise", "--from", "/etc/hostname", "--port", "443"], Out::Null, As::Root, 2, "filter when recording instead"),
        (vec!["advise", "--from", "/etc/hostname", "--duration", "5"], Out::Null, As::Root, 2, "cannot be used with"),
        (vec!["advise", "--from", "/bin/sh"], Out::Null, As::Root, 2, "is not a bbrscope stream recording"),
        (vec!["completions", "tcsh"], Out::Null, As::Root, 2, "possible values: bash"),
        (vec!["man"], Out::Null, As::Root, 2, "<DIR>"),
        // A missing kernel feature: this kernel has no such qdisc.
        (vec!["apply", "bbr", "--qdisc", "nosuchqdisc", "--dry-run", r[0], r[1]], Out::Null, As::Root, 2, "cannot create qdisc"),
        // A missing privilege.
        (vec!["stream", "--duration", "1"], Out::Null, As::Nobody, 2, "needs root"),
        (vec!["apply", "bbr", "--netns", "/proc/1/ns/net", r[0], r[1]], Out::Null, As::Nobody, 2, "permission denied (run as root)"),
        // Tracing allowed, sock_ops not: named as a missing capability, not a kernel that lacks
        // helpers; refused where only sock_ops can serve, a fallback with a warning elsewhere.
        (vec!["stream", "--duration", "1"], Out::Null, As::RootWithoutNetAdmin, 0, "need CAP_NET_ADMIN (or CAP_SYS_ADMIN), which this process lacks: using tracepoints"),
        (vec!["stream", "--observer", "sockops", "--duration", "1"], Out::Null, As::RootWithoutNetAdmin, 2, "--observer sockops: sock_ops programs need CAP_NET_ADMIN"),
        (vec!["experiment", "--arms", "cubic,reno", "--duration", "1m"], Out::Null, As::RootWithoutNetAdmin, 2, "an experiment needs the sockops observer: sock_ops programs need CAP_NET_ADMIN"),
        // Output that cannot be written.
        (vec!["status", "--json", r[0], r[1]], Out::Full, As::Root, 1, "No space left on device"),
        (vec!["status", r[0], r[1]], Out::ClosedPipe, As::Root, 0, ""),
        (vec!["stream", "--duration", "2"], Out::ClosedPipe, As::Root, 0, ""),
        // A large ring is taken, with a word about what it costs.
        (vec!["stream", "--duration", "1", "--ring-size", "128M"], Out::Null, As::Root, 0, "--ring-size 128 MiB: the ring is kernel memory"),
        (vec!["advise", "--duration", "1", "--json", r[0], r[1]], Out::Full, As::Root, 1, "No space left on device"),
        (vec!["advise", "--duration", "1", r[0], r[1]], Out::ClosedPipe, As::Root, 0, ""),
        (vec!["completions", "bash"], Out::Full, As::Root, 1, "No space left on device"),
        (vec!["completions", "zsh"], Out::ClosedPipe, As::Root, 0, ""),
        (vec!["completions", "fish"], Out::Null, As::Root, 0, ""),
        (vec!["man", "/proc/no-such-dir"], Out::Null, As::Root, 1, "creating /proc/no-such-dir"),
        (vec!["status", r[0], r[1]], Out::Closed, As::Root, 2, "standard output is closed"),
        (vec!["status", r[0], r[1]], Out::Null, As::Root, 0, ""),
    ];
    for (args, out, who, code, needle) in &table {
        let mut c = bbrscope();
        c.args(args).stdin(Stdio::null()).stderr(Stdio::piped());
        match out {
            Out::Null => c.stdout(Stdio::null()),
            Out::Full => c.stdout(full()),
            Out::ClosedPipe => c.stdout(closed_pipe()),
            Out::Closed => {
                c.stdout(Stdio::null());
                // SAFETY: close(2) is async-signal-safe, as pre_exec requires.
                unsafe {
                    c.pre_exec(|| {
                        libc::close(libc::STDOUT_FILENO);
                        Ok(())
                    })
                }
            }
        };
        match who {
            As::Root => {}
            // std clears the supplementary groups when root sets a uid.
            As::Nobody => {
                c.uid(65534).gid(65534);
            }
            // SAFETY: prctl(2) is async-signal-safe, as pre_exec requires. Root's capabilities
            // after exec are its bounding set, so dropping from it drops them.
            As::RootWithoutNetAdmin => unsafe {
                c.pre_exec(|| {
                    // CAP_NET_ADMIN, CAP_SYS_ADMIN (linux/capability.h; libc does not name them).
                    for cap in [12, 21] {
                        if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            },
        }
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let row = format!("{args:?} ({out:?}, {who:?})");
        assert_eq!(o.status.code(), Some(*code), "{row}: {err}");
        assert!(err.contains(needle), "{row}: expected '{needle}' in: {err}");
        if *code == 0 {
            // Success is quiet on stderr, except that a stream says when it stops.
            assert!(err.lines().all(|l| !l.contains("error")), "{row}: {err}");
        } else if *code == 2 {
            // Bad input: one line, before anything was done.
            assert_eq!(err.trim_end().lines().count(), 1, "{row}: one line: {err}");
            assert!(err.starts_with("bbrscope: "), "{row}: {err}");
        } else {
            // A failure while working: one error line, last, after what the command said it was
            // doing (`advise` says when it starts watching).
            let lines: Vec<&str> = err.trim_end().lines().collect();
            assert_eq!(lines.iter().filter(|l| l.contains("error")).count(), 1, "{row}: one error line: {err}");
            assert!(lines.last().is_some_and(|l| l.starts_with("bbrscope: error")), "{row}: {err}");
        }
    }
}

/// A write to stderr that fails — a full disk, a reader that left — never panics (exit 101) and
/// never changes the outcome: every subcommand that writes diagnostics, on its error path and on
/// its running path (the exporter's and the experiment's status lines), exits as it would with
/// stderr intact.
#[test]
fn a_stderr_that_cannot_be_written_changes_nothing() {
    require_root();
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_str().unwrap().to_string();
    let fixture = format!("{}/tests/fixtures/experiment-two-populations.ndjson", env!("CARGO_MANIFEST_DIR"));
    #[rustfmt::skip]
    let table: Vec<(Vec<&str>, i32)> = vec![
        (vec!["nosuchcommand"], 2),
        (vec!["stream", "--port", "0"], 2),
        (vec!["replay", "/no/such/capture.ndjson"], 2),
        (vec!["experiment", "--arms", "cubic"], 2),
        (vec!["apply", "nosuchcc", "--root", &root], 2),
        // Warnings, then the report on stdout.
        (vec!["experiment", "--analyze", &fixture, "--json"], 0),
        (vec!["status", "--root", &root], 0),
        (vec!["stream", "--duration", "1"], 0),
        (vec!["export", "--listen", "127.0.0.1:0", "--duration", "2"], 0),
        (vec!["advise", "--duration", "2", "--root", &root], 0),
        (vec!["experiment", "--arms", "cubic,bbr", "--port", "1", "--duration", "3s", "--headless"], 0),
    ];
    for (args, code) in &table {
        for (name, err) in [("/dev/full", Stdio::from(full())), ("a closed pipe", Stdio::from(closed_pipe()))] {
            let o = bbrscope().args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(err).output().unwrap();
            assert_eq!(o.status.code(), Some(*code), "{args:?} with stderr on {name}: {}", o.status);
        }
    }
}

/// A usage error points to the help of the subcommand it was made in, where the right spelling
/// is; with no subcommand, to the top-level help.
#[test]
fn usage_errors_point_to_the_subcommands_help() {
    let cases = [
        (vec!["stream", "--prot", "9"], "(see bbrscope stream --help)"),
        (vec!["demo", "--rate", "fast"], "(see bbrscope demo --help)"),
        (vec!["apply"], "(see bbrscope apply --help)"),
        (vec!["--frobnicate"], "(see bbrscope --help)"),
        (vec!["nosuchcommand"], "(see bbrscope --help)"),
    ];
    for (args, pointer) in cases {
        let out = bbrscope().args(&args).stdout(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.lines().count() == 1 && err.trim_end().ends_with(pointer), "{args:?}: {err}");
    }
}

/// bash completion, loaded from `bbrscope completions bash` and run as bash runs it on TAB:
/// subcommands, and algorithm names wherever an algorithm is asked for (the algorithms Linux
/// ships; any other name is still accepted when typed).
#[test]
fn bash_completes_subcommands_and_algorithm_names() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bbrscope.bash");
    let out = bbrscope().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(&script, &out.stdout).unwrap();
    let complete = |line: &str| -> String {
        let program = r#"source "$1"; spec=$(complete -p bbrscope); fn=${spec##*-F }; fn=${fn%% *}
            read -ra w <<<"$2"; [[ $2 == *" " ]] && w+=("")
            COMP_WORDS=("${w[@]}"); COMP_CWORD=$((${#w[@]} - 1)); COMP_LINE=$2; COMP_POINT=${#2}
            "$fn" bbrscope "${w[-1]}" "${w[-2]}"; echo "${COMPREPLY[*]}""#;
        let out =
            std::process::Command::new("bash").args(["-c", program, "bash"]).arg(&script).arg(line).output().unwrap();
        assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(complete("bbrscope ap"), "apply");
    assert_eq!(complete("bbrscope apply cu"), "cubic");
    assert_eq!(complete("bbrscope apply --netns x we"), "westwood");
    assert_eq!(complete("bbrscope stream --cc bb"), "bbr");
    assert_eq!(complete("bbrscope top --cc ve"), "vegas veno");
    assert_eq!(complete("bbrscope demo --algos hy"), "hybla");
    // Typed names the list lacks are still taken (checked against the kernel's list when used).
    let out = bbrscope().args(["stream", "--cc", "some-out-of-tree-cc", "--help"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `cmd ARGS` as uid/gid 65534 (nobody) with no capabilities, and asserts that it succeeded.
fn as_nobody(cmd: &str, args: &[&str]) {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", cmd])
        .args(args)
        .output()
        .expect("setpriv (util-linux)");
    assert!(out.status.success(), "{cmd} {args:?} as nobody: {}", String::from_utf8_lossy(&out.stderr));
}

/// What root writes where another user can write (a directory that user owns, as in /tmp or a
/// home): links that user planted at the names are replaced, never followed, and a file that
/// user made first becomes root's own with the mode bbrscope means. The files: man pages and a
/// figure (`--plot`); the experiment's `--record` is in tests/experiment.rs.
#[test]
fn root_writes_cannot_be_redirected_by_another_user() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    require_root();
    // The victim lies where only root can write; the user's directory is theirs.
    let safe = tempfile::tempdir().unwrap();
    let victim = safe.path().join("victim");
    std::fs::write(&victim, "root's own\n").unwrap();
    std::fs::set_permissions(safe.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let theirs = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(theirs.path(), Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(theirs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let at = |name: &str| theirs.path().join(name).to_str().unwrap().to_string();
    let v = victim.to_str().unwrap();
    as_nobody("ln", &["-s", v, &at("bbrscope.1")]);
    as_nobody("ln", &["-s", v, &at("plot.svg")]);
    // A file the user made first, for root to write into.
    as_nobody("sh", &["-c", &format!("umask 0; : > {}", at("bbrscope-stream.1"))]);

    let out = bbrscope().args(["man", theirs.path().to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fixture = format!("{}/tests/fixtures/experiment-three-groups.ndjson", env!("CARGO_MANIFEST_DIR"));
    let out = bbrscope().args(["experiment", "--analyze", &fixture, "--plot", &at("plot.svg")]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's own\n", "written through a planted link");
    for (name, what) in [("bbrscope.1", ".TH"), ("bbrscope-stream.1", ".TH"), ("plot.svg", "<svg")] {
        let m = std::fs::symlink_metadata(at(name)).unwrap();
        assert!(m.is_file(), "{name}: not replaced by a file of its own");
        assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o644), "{name}: root's, with the mode bbrscope means");
        assert!(std::fs::read_to_string(at(name)).unwrap().contains(what), "{name}");
    }
    let left: Vec<String> = std::fs::read_dir(theirs.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// The README's first hour runs as written: every `bbrscope` command in its code blocks is one
/// the binary takes, options and all (each parsed with `--help` appended, which prints the help
/// only once everything before it parsed).
#[test]
fn the_readmes_first_hour_parses() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let section = readme.split("## The first hour").nth(1).unwrap().split("\n## ").next().unwrap();
    let mut commands = Vec::new();
    for block in section.split("```sh\n").skip(1) {
        let code = block.split("```").next().unwrap();
        for line in code.lines() {
            let line = line.split('#').next().unwrap();
            for part in line.split("&&").flat_map(|p| p.split('|')) {
                let words: Vec<&str> = part.split_whitespace().collect();
                if words.first() == Some(&"bbrscope") {
                    commands.push(words[1..].iter().map(ToString::to_string).collect::<Vec<_>>());
                }
            }
        }
    }
    assert!(commands.len() >= 7, "{commands:?}");
    for args in commands {
        let out = bbrscope().args(&args).arg("--help").output().unwrap();
        assert!(out.status.success(), "bbrscope {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

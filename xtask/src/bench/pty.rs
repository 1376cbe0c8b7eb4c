//! A pseudo-terminal for running the dashboard as a user would: its output is read continuously
//! (a terminal that is not read blocks the program writing to it), and keys can be sent.

use std::{
    fs::File,
    io::{Read as _, Write as _},
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::process::CommandExt as _,
    },
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};

/// Output kept for searching; older output is dropped.
const KEEP: usize = 1 << 20;

#[derive(Default)]
struct Output {
    /// Bytes written by the program since it started.
    total: u64,
    /// The latest bytes of it (at most `KEEP`).
    tail: Vec<u8>,
}

impl Output {
    /// What was written after position `since` (as much of it as is kept).
    fn after(&self, since: u64) -> &[u8] {
        let from = since.saturating_sub(self.total - self.tail.len() as u64) as usize;
        &self.tail[from.min(self.tail.len())..]
    }
}

pub(super) struct Pty {
    master: File,
    output: Arc<Mutex<Output>>,
    size: Mutex<(u16, u16)>,
}

impl Pty {
    /// Spawns `cmd` on a new `cols` x `rows` terminal, which becomes its controlling terminal
    /// and its standard input, output and error.
    pub(super) fn spawn(cmd: &mut Command, cols: u16, rows: u16) -> Result<(Child, Pty)> {
        let (mut master, mut slave) = (-1, -1);
        let size = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: openpty(3) writes two fds into the two ints and reads the winsize; both live through the call.
        let r = unsafe {
            libc::openpty(&raw mut master, &raw mut slave, std::ptr::null_mut(), std::ptr::null(), &raw const size)
        };
        if r != 0 {
            bail!("openpty: {}", std::io::Error::last_os_error());
        }
        // SAFETY: openpty succeeded, so both fds are open and nothing else owns them.
        let (master, slave) = unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        cmd.stdin(Stdio::from(slave.try_clone()?)).stdout(Stdio::from(slave.try_clone()?)).stderr(Stdio::from(slave));
        // A session of its own with the terminal as controlling terminal, as a shell would do.
        // SAFETY: pre_exec: the closure only calls setsid(2) and ioctl(2), both async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        let output = Arc::new(Mutex::new(Output::default()));
        let (mut reader, sink) = (master.try_clone()?, output.clone());
        thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            // Reading fails with EIO once the program has exited and closed the terminal.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut out = sink.lock().unwrap();
                out.total += n as u64;
                out.tail.extend_from_slice(&buf[..n]);
                if out.tail.len() > KEEP {
                    let excess = out.tail.len() - KEEP;
                    out.tail.drain(..excess);
                }
            }
        });
        Ok((child, Pty { master, output, size: Mutex::new((cols, rows)) }))
    }

    pub(super) fn send(&self, keys: &[u8]) -> Result<()> {
        (&self.master).write_all(keys)?;
        Ok(())
    }

    /// The whole screen as the program draws it next. A program like the dashboard only redraws
    /// what changed, so text that stays put is not in its recent output; a change of the
    /// terminal's width (SIGWINCH) makes it draw everything again.
    pub(super) fn redraw(&self) -> Result<String> {
        let since = self.position();
        let mut size = self.size.lock().unwrap();
        let cols = if size.0.is_multiple_of(2) { size.0 + 1 } else { size.0 - 1 };
        let ws = libc::winsize { ws_row: size.1, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ on our terminal fd reads the winsize we pass, which lives through the call.
        if unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
            bail!("TIOCSWINSZ: {}", std::io::Error::last_os_error());
        }
        size.0 = cols;
        drop(size);
        thread::sleep(Duration::from_millis(500));
        Ok(self.text_since(since))
    }

    /// Output after `since`, as text (escape sequences included).
    pub(super) fn text_since(&self, since: u64) -> String {
        String::from_utf8_lossy(self.output.lock().unwrap().after(since)).into_owned()
    }

    /// Bytes of output so far: a position to search from.
    pub(super) fn position(&self) -> u64 {
        self.output.lock().unwrap().total
    }

    /// Waits until output after `since` contains `needle`; returns how long that took, or None
    /// after `timeout`.
    pub(super) fn wait_for(&self, since: u64, needle: &str, timeout: Duration) -> Option<Duration> {
        let start = Instant::now();
        let mut from = since;
        while start.elapsed() < timeout {
            {
                let out = self.output.lock().unwrap();
                if out.after(from).windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    return Some(start.elapsed());
                }
                // Next time, only what is new (and a needle cut at the end of this read).
                from = from.max(out.total.saturating_sub(needle.len() as u64));
            }
            thread::sleep(Duration::from_millis(2));
        }
        None
    }

    /// The latest output as text (escape sequences included), for error messages.
    pub(super) fn tail_text(&self, bytes: usize) -> String {
        self.text_since(self.position().saturating_sub(bytes as u64))
    }
}

/// Screen output without its control sequences (colours, cursor moves), so text drawn in one
/// go reads as it does on the screen. Cells the program skipped with a cursor move are missing.
pub(super) fn plain(output: &str) -> String {
    let mut out = String::with_capacity(output.len());
    let mut chars = output.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        // CSI: ESC [ parameters, then a final byte from '@' to '~'; other escapes are two bytes.
        if chars.next_if_eq(&'[').is_some() {
            for f in chars.by_ref() {
                if ('@'..='~').contains(&f) {
                    break;
                }
            }
        } else {
            chars.next();
        }
    }
    out
}

/// The last number written right after `label` in `text` ("drops 12").
pub(super) fn number_after(text: &str, label: &str) -> Option<u64> {
    text.rmatch_indices(label).find_map(|(i, _)| {
        let digits: String = text[i + label.len()..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

//! The packet mover: one thread per emulated link, moving IP packets between the sender's and the
//! receiver's TUN device. Each packet gets an exact virtual release time from the link model; the
//! thread sleeps on a timerfd armed (absolute, with 1 ns timer slack) for the earliest pending
//! release and, on each wake, releases everything due — no busy waiting, no timer wheel.

use std::{
    collections::VecDeque,
    io,
    num::NonZeroU64,
    os::fd::OwnedFd,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    },
    thread::JoinHandle,
};

use anyhow::{Result, anyhow};
use rustix::{
    event::epoll,
    time::{ClockId, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec},
};
use serde::Serialize;

use crate::{
    link_model::{DataPath, LinkConfig, Verdict},
    sys,
};

/// How often the thread looks at its stop flag when no packet or timer wakes it.
const STOP_POLL: Timespec = Timespec { tv_sec: 0, tv_nsec: 100_000_000 };
/// Above normal threads, well below the kernel's own real-time threads (50 and up).
const REALTIME_PRIORITY: i32 = 10;
/// Larger than any packet a TUN device without offloads hands over.
const READ_BUF: usize = 65_536;

/// Live counters, updated by the mover thread and read by anyone.
#[derive(Default)]
struct Stats {
    data_packets: AtomicU64,
    data_bytes: AtomicU64,
    lost: AtomicU64,
    queue_dropped: AtomicU64,
    delivered: AtomicU64,
    delivered_bytes: AtomicU64,
    queue_ns_sum: AtomicU64,
    queue_ns_max: AtomicU64,
    return_packets: AtomicU64,
    released: AtomicU64,
    late_ns_sum: AtomicU64,
    late_ns_max: AtomicU64,
    late_over_ms: AtomicU64,
    largest_packet: AtomicU64,
    write_errors: AtomicU64,
}

/// What the emulator did to the traffic: the proof that the impairment was applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LinkCounters {
    /// Packets (and IP bytes) that entered the data direction.
    pub data_packets: u64,
    pub data_bytes: u64,
    /// Dropped by the random-loss stage.
    pub lost: u64,
    /// Dropped because the bottleneck queue was full.
    pub queue_dropped: u64,
    /// Passed the bottleneck and were handed to the receiver.
    pub delivered: u64,
    pub delivered_bytes: u64,
    /// Time delivered packets waited in the bottleneck queue.
    pub queue_delay_mean_us: f64,
    pub queue_delay_max_us: f64,
    /// Packets in the return direction (ACKs).
    pub return_packets: u64,
    /// How late packets left compared with their computed release time (timer and scheduling
    /// latency): the emulator's own timing error.
    pub release_late_mean_us: f64,
    pub release_late_max_us: f64,
    /// Packets released more than a millisecond late.
    pub release_late_over_ms: u64,
    /// Largest IP packet seen: at most the MTU when offloads are really off.
    pub largest_packet: u64,
    pub write_errors: u64,
}

impl LinkCounters {
    /// Fraction of packets the random-loss stage dropped.
    pub fn loss_rate(&self) -> f64 {
        if self.data_packets == 0 { 0.0 } else { self.lost as f64 / self.data_packets as f64 }
    }

    /// Adds another run's counters (means weighted by packet counts, maxima kept).
    pub fn add(&mut self, o: &LinkCounters) {
        let mean = |a: f64, na: u64, b: f64, nb: u64| {
            if na + nb == 0 { 0.0 } else { (a * na as f64 + b * nb as f64) / (na + nb) as f64 }
        };
        let (released, o_released) = (self.delivered + self.return_packets, o.delivered + o.return_packets);
        self.queue_delay_mean_us = mean(self.queue_delay_mean_us, self.delivered, o.queue_delay_mean_us, o.delivered);
        self.release_late_mean_us = mean(self.release_late_mean_us, released, o.release_late_mean_us, o_released);
        self.queue_delay_max_us = self.queue_delay_max_us.max(o.queue_delay_max_us);
        self.release_late_max_us = self.release_late_max_us.max(o.release_late_max_us);
        self.largest_packet = self.largest_packet.max(o.largest_packet);
        self.data_packets += o.data_packets;
        self.data_bytes += o.data_bytes;
        self.lost += o.lost;
        self.queue_dropped += o.queue_dropped;
        self.delivered += o.delivered;
        self.delivered_bytes += o.delivered_bytes;
        self.return_packets += o.return_packets;
        self.release_late_over_ms += o.release_late_over_ms;
        self.write_errors += o.write_errors;
    }
}

impl Stats {
    fn snapshot(&self) -> LinkCounters {
        let get = |a: &AtomicU64| a.load(Relaxed);
        let mean_us = |sum: u64, n: u64| if n == 0 { 0.0 } else { sum as f64 / n as f64 / 1e3 };
        let delivered = get(&self.delivered);
        LinkCounters {
            data_packets: get(&self.data_packets),
            data_bytes: get(&self.data_bytes),
            lost: get(&self.lost),
            queue_dropped: get(&self.queue_dropped),
            delivered,
            delivered_bytes: get(&self.delivered_bytes),
            queue_delay_mean_us: mean_us(get(&self.queue_ns_sum), delivered),
            queue_delay_max_us: get(&self.queue_ns_max) as f64 / 1e3,
            return_packets: get(&self.return_packets),
            release_late_mean_us: mean_us(get(&self.late_ns_sum), get(&self.released)),
            release_late_max_us: get(&self.late_ns_max) as f64 / 1e3,
            release_late_over_ms: get(&self.late_over_ms),
            largest_packet: get(&self.largest_packet),
            write_errors: get(&self.write_errors),
        }
    }
}

/// The running mover thread. Dropping it stops the thread, which closes the TUN devices.
pub(super) struct Mover {
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Mover {
    /// Moves packets from `sender` through the data direction into `receiver`, and back.
    pub(super) fn start(sender: OwnedFd, receiver: OwnedFd, cfg: &LinkConfig) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let (s, st, cfg) = (stop.clone(), stats.clone(), *cfg);
        let thread = std::thread::Builder::new()
            .name("bbrscope-link".into())
            .spawn(move || Pump::new(sender, receiver, &cfg, st)?.run(&s))?;
        Ok(Mover { stop, stats, thread: Some(thread) })
    }

    pub(super) fn counters(&self) -> LinkCounters {
        self.stats.snapshot()
    }

    /// Stops the thread and reports how it ended.
    pub(super) fn stop(&mut self) -> Result<()> {
        self.stop.store(true, Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(anyhow!("the link emulator failed: {e}")),
            Some(Err(_)) => Err(anyhow!("the link emulator thread panicked")),
        }
    }
}

impl Drop for Mover {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

struct Pump {
    sender: OwnedFd,
    receiver: OwnedFd,
    timer: OwnedFd,
    epoll: OwnedFd,
    data: DataPath,
    return_delay_ns: u64,
    /// Packets in flight each way, in release order (release times only grow: the bottleneck
    /// serialises in arrival order and the delay is constant).
    forward: VecDeque<(u64, Vec<u8>)>,
    back: VecDeque<(u64, Vec<u8>)>,
    stats: Arc<Stats>,
}

const SENDER: u64 = 0;
const RECEIVER: u64 = 1;
const TIMER: u64 = 2;

impl Pump {
    fn new(sender: OwnedFd, receiver: OwnedFd, cfg: &LinkConfig, stats: Arc<Stats>) -> io::Result<Self> {
        // Timer slack defaults to 50 us per thread; packet release times need ~1 us.
        rustix::thread::set_current_timer_slack(NonZeroU64::new(1))?;
        // Releasing packets on time wins over the traffic being emulated (senders, receivers,
        // the observer) on a busy machine. Without the privilege it stays a normal thread:
        // timing is then only as good as the scheduler's.
        let _ = sys::thread::realtime(REALTIME_PRIORITY);
        let timer =
            rustix::time::timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC)?;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        for (fd, token) in [(&sender, SENDER), (&receiver, RECEIVER), (&timer, TIMER)] {
            epoll::add(&epoll, fd, epoll::EventData::new_u64(token), epoll::EventFlags::IN)?;
        }
        Ok(Pump {
            sender,
            receiver,
            timer,
            epoll,
            data: DataPath::new(cfg),
            return_delay_ns: cfg.one_way_ns(),
            forward: VecDeque::new(),
            back: VecDeque::new(),
            stats,
        })
    }

    fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut buf = vec![0u8; READ_BUF];
        let mut events = [epoll::Event { flags: epoll::EventFlags::empty(), data: epoll::EventData::new_u64(0) }; 4];
        while !stop.load(Relaxed) {
            let n = match epoll::wait(&self.epoll, &mut events, Some(&STOP_POLL)) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            for ev in &events[..n] {
                match ev.data.u64() {
                    SENDER => self.take_data(&mut buf)?,
                    RECEIVER => self.take_return(&mut buf)?,
                    _ => drain_timer(&self.timer),
                }
            }
            self.release();
            self.arm_timer()?;
        }
        Ok(())
    }

    fn take_data(&mut self, buf: &mut [u8]) -> io::Result<()> {
        while let Some(len) = read_packet(&self.sender, buf)? {
            let now = monotonic_ns();
            let s = &self.stats;
            s.data_packets.fetch_add(1, Relaxed);
            s.data_bytes.fetch_add(len as u64, Relaxed);
            s.largest_packet.fetch_max(len as u64, Relaxed);
            match self.data.arrive(now, len) {
                Verdict::Lost => s.lost.fetch_add(1, Relaxed),
                Verdict::QueueFull => s.queue_dropped.fetch_add(1, Relaxed),
                Verdict::Deliver { release_ns, queue_ns } => {
                    s.queue_ns_sum.fetch_add(queue_ns, Relaxed);
                    s.queue_ns_max.fetch_max(queue_ns, Relaxed);
                    self.forward.push_back((release_ns, buf[..len].to_vec()));
                    0
                }
            };
        }
        Ok(())
    }

    fn take_return(&mut self, buf: &mut [u8]) -> io::Result<()> {
        while let Some(len) = read_packet(&self.receiver, buf)? {
            self.stats.return_packets.fetch_add(1, Relaxed);
            self.back.push_back((monotonic_ns() + self.return_delay_ns, buf[..len].to_vec()));
        }
        Ok(())
    }

    /// Hands over every packet whose time has come, each way.
    fn release(&mut self) {
        let s = &self.stats;
        for (queue, out, forward) in [(&mut self.forward, &self.receiver, true), (&mut self.back, &self.sender, false)]
        {
            while let Some(&(due, _)) = queue.front() {
                let now = monotonic_ns();
                if due > now {
                    break;
                }
                let (_, pkt) = queue.pop_front().expect("front exists");
                let late = now - due;
                s.released.fetch_add(1, Relaxed);
                s.late_ns_sum.fetch_add(late, Relaxed);
                s.late_ns_max.fetch_max(late, Relaxed);
                if late > 1_000_000 {
                    s.late_over_ms.fetch_add(1, Relaxed);
                }
                if rustix::io::write(out, &pkt).is_err() {
                    s.write_errors.fetch_add(1, Relaxed);
                } else if forward {
                    s.delivered.fetch_add(1, Relaxed);
                    s.delivered_bytes.fetch_add(pkt.len() as u64, Relaxed);
                }
            }
        }
    }

    /// Sets the timer for the earliest pending release (or disarms it).
    fn arm_timer(&self) -> io::Result<()> {
        let next = [self.forward.front(), self.back.front()].into_iter().flatten().map(|&(t, _)| t).min();
        // All zero disarms; a time already past fires at once.
        let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
        let at =
            next.map_or(zero, |t| Timespec { tv_sec: (t / 1_000_000_000) as i64, tv_nsec: (t % 1_000_000_000) as _ });
        let spec = Itimerspec { it_interval: zero, it_value: at };
        rustix::time::timerfd_settime(&self.timer, TimerfdTimerFlags::ABSTIME, &spec).map(drop).map_err(io::Error::from)
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock the timer is armed on, and the one bbrscope's
/// observer stamps its samples with.
fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One packet from a non-blocking TUN descriptor, or `None` when there are no more.
fn read_packet(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Ok(n) => return Ok(Some(n)),
            Err(rustix::io::Errno::AGAIN) => return Ok(None),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

fn drain_timer(timer: &OwnedFd) {
    // The expiration count (8 bytes, as timerfd requires) is not needed; EAGAIN is fine.
    let mut expirations = [0u8; 8];
    let _ = rustix::io::read(timer, &mut expirations);
}

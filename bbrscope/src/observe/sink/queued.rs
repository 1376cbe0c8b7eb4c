//! Output written by a thread of its own. `stream` reads the kernel's ring buffer and writes its
//! lines on one thread: while a write blocks (a reader that pauses, a disk whose journal commit
//! stalls the write), the ring is not read, and at thousands of flows a second its 4 MB fill in
//! under a second and the kernel drops records. Here a write blocks only the writer thread; the
//! lines wait in memory, up to a bound, and the ring goes on being read.
//!
//! Buffers change hands rather than bytes: the sink's filled buffer goes to the writer thread and
//! an emptied one comes back for the next lines, one hand-over per batch of records (about 20 a
//! second) whatever its size, and the bound is in bytes. At 5,000 short flows a second, copying
//! each 64 KiB piece and waking the writer for it were a tenth of `stream`'s profile; in CPU
//! measured alternately the change saved only ~0.03% of a core (bench/README.md).

use std::{
    io::{self, Write},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
        mpsc::{Receiver, Sender, TryRecvError, channel},
    },
    thread::JoinHandle,
};

use super::json::Output;

/// Bytes handed over and not yet written: about 6 s of `stream` at 10,000 short flows a second.
/// Beyond it, handing over waits for the writer, as a plain write would.
const QUEUED_BYTES: usize = 64 << 20;

pub(crate) struct QueuedWriter {
    tx: Option<Sender<Vec<u8>>>,
    /// Buffers the writer has emptied, for the next lines.
    spare: Receiver<Vec<u8>>,
    queued: Arc<AtomicUsize>,
    /// [`QUEUED_BYTES`], but for tests.
    bound: usize,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl QueuedWriter {
    pub(crate) fn new(out: impl Write + Send + 'static) -> io::Result<Self> {
        Self::with_bound(out, QUEUED_BYTES)
    }

    fn with_bound(mut out: impl Write + Send + 'static, bound: usize) -> io::Result<Self> {
        let (tx, rx) = channel::<Vec<u8>>();
        let (spare_tx, spare) = channel::<Vec<u8>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let left = queued.clone();
        let thread = std::thread::Builder::new().name("output".into()).spawn(move || {
            for mut piece in rx {
                out.write_all(&piece)?;
                out.flush()?;
                left.fetch_sub(piece.len(), Ordering::Release);
                piece.clear();
                // The sink may have finished: then the buffer is dropped here.
                let _ = spare_tx.send(piece);
            }
            Ok(())
        })?;
        Ok(QueuedWriter { tx: Some(tx), spare, queued, bound, thread: Some(thread) })
    }

    /// Waits until everything handed over is written: the writer's first error, if any.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        drop(self.tx.take());
        match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(_)) => Err(io::Error::other("the output thread panicked")),
        }
    }

    /// The writer's error, once it has stopped.
    fn stopped(&mut self) -> io::Error {
        match self.finish() {
            Err(e) => e,
            Ok(()) => io::Error::other("the output thread ended"),
        }
    }
}

impl Output for QueuedWriter {
    fn take(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        let Some(tx) = self.tx.as_ref() else { return Err(io::Error::other("output already finished")) };
        // Over the bound: wait for the writer to return a buffer (it has then written one).
        let mut next = None;
        while self.queued.load(Ordering::Acquire) >= self.bound {
            match self.spare.recv() {
                Ok(b) => next = Some(b),
                Err(_) => return Err(self.stopped()),
            }
        }
        // Of the buffers returned, one is kept for the next lines, the rest freed.
        loop {
            match self.spare.try_recv() {
                Ok(b) => next = Some(b),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Err(self.stopped()),
            }
        }
        let next = next.unwrap_or_else(|| Vec::with_capacity(buf.capacity()));
        let full = std::mem::replace(buf, next);
        let len = full.len();
        self.queued.fetch_add(len, Ordering::AcqRel);
        if tx.send(full).is_err() {
            // The writer stopped on an error (it drops its end of the queue): that error.
            self.queued.fetch_sub(len, Ordering::AcqRel);
            return Err(self.stopped());
        }
        Ok(())
    }

    /// Hands over only: waiting for the writer here would block on the output again.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Mutex, mpsc};

    /// A writer that blocks until told to go on, then records what it got.
    struct Stalled {
        go: mpsc::Receiver<()>,
        got: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _ = self.go.recv();
            self.got.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Hands `bytes` over as one buffer.
    fn hand(w: &mut QueuedWriter, bytes: &[u8]) -> io::Result<()> {
        let mut buf = bytes.to_vec();
        w.take(&mut buf)?;
        assert!(buf.is_empty(), "the buffer's bytes were taken");
        Ok(())
    }

    /// Hand-overs return while the output is stalled; everything arrives, in order, once it
    /// moves.
    #[test]
    fn writes_return_while_the_output_is_stalled() {
        let (go, wait) = mpsc::channel();
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut w = QueuedWriter::new(Stalled { go: wait, got: got.clone() }).unwrap();
        for i in 0..100u8 {
            hand(&mut w, &[i; 3]).unwrap();
        }
        Output::flush(&mut w).unwrap();
        assert!(got.lock().unwrap().is_empty(), "the output has not moved");
        for _ in 0..100 {
            go.send(()).unwrap();
        }
        w.finish().unwrap();
        let want: Vec<u8> = (0..100u8).flat_map(|i| [i; 3]).collect();
        assert_eq!(*got.lock().unwrap(), want);
    }

    /// Past the bound, handing over waits for the writer: the bytes held stay within it.
    #[test]
    fn handing_over_waits_past_the_bound() {
        let (go, wait) = mpsc::channel();
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut w = QueuedWriter::with_bound(Stalled { go: wait, got: got.clone() }, 1000).unwrap();
        let piece = vec![7u8; 500];
        // Two pieces reach the bound; a third must wait until one is written.
        hand(&mut w, &piece).unwrap();
        hand(&mut w, &piece).unwrap();
        let third = std::thread::spawn(move || {
            hand(&mut w, &piece).unwrap();
            w
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!third.is_finished(), "a third piece was taken past the bound");
        go.send(()).unwrap();
        let mut w = third.join().unwrap();
        assert!(w.queued.load(Ordering::Acquire) <= 1000);
        go.send(()).unwrap();
        go.send(()).unwrap();
        w.finish().unwrap();
        assert_eq!(*got.lock().unwrap(), vec![7u8; 1500]);
    }

    /// A write error (a closed pipe) comes back from a later hand-over, as itself.
    #[test]
    fn the_writers_error_comes_back() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut w = QueuedWriter::new(Closed).unwrap();
        // The first pieces may be queued before the writer has failed; later ones are refused.
        let start = std::time::Instant::now();
        let e = loop {
            if let Err(e) = hand(&mut w, b"x\n") {
                break e;
            }
            assert!(start.elapsed() < std::time::Duration::from_secs(10), "no error");
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}

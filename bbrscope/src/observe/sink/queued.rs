//! Output written by a thread of its own. `stream` reads the kernel's ring buffer and writes its
//! lines on one thread: while a write blocks (a reader that pauses, a disk whose journal commit
//! stalls the write), the ring is not read, and at thousands of flows a second its 4 MB fill in
//! under a second and the kernel drops records. Here a write blocks only the writer thread; the
//! lines wait in memory, up to a bound, and the ring goes on being read.

use std::{
    io::{self, Write},
    sync::mpsc::{SyncSender, sync_channel},
    thread::JoinHandle,
};

/// Pieces waiting for the writer thread. The JSON sink hands over about 64 KiB at a time when
/// busy (less when not), so this holds up to ~64 MiB: about 7 s of `stream` at 10,000 short
/// flows a second. Beyond it, writing waits for the thread as a plain write would.
const QUEUED: usize = 1024;

pub(crate) struct QueuedWriter {
    tx: Option<SyncSender<Vec<u8>>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl QueuedWriter {
    pub(crate) fn new(mut out: impl Write + Send + 'static) -> io::Result<Self> {
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUED);
        let thread = std::thread::Builder::new().name("output".into()).spawn(move || {
            for piece in rx {
                out.write_all(&piece)?;
                out.flush()?;
            }
            Ok(())
        })?;
        Ok(QueuedWriter { tx: Some(tx), thread: Some(thread) })
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
}

impl Write for QueuedWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let sent = self.tx.as_ref().map(|tx| tx.send(buf.to_vec()));
        match sent {
            Some(Ok(())) => Ok(buf.len()),
            // The writer stopped on an error (it drops its end of the queue): that error.
            Some(Err(_)) => match self.finish() {
                Err(e) => Err(e),
                Ok(()) => Err(io::Error::other("the output thread ended")),
            },
            None => Err(io::Error::other("output already finished")),
        }
    }

    /// Hands over only: waiting for the writer here would block on the output again.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex, mpsc};

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

    /// Writes return while the output is stalled; everything arrives, in order, once it moves.
    #[test]
    fn writes_return_while_the_output_is_stalled() {
        let (go, wait) = mpsc::channel();
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut w = QueuedWriter::new(Stalled { go: wait, got: got.clone() }).unwrap();
        for i in 0..100u8 {
            w.write_all(&[i; 3]).unwrap();
        }
        w.flush().unwrap();
        assert!(got.lock().unwrap().is_empty(), "the output has not moved");
        for _ in 0..100 {
            go.send(()).unwrap();
        }
        w.finish().unwrap();
        let want: Vec<u8> = (0..100u8).flat_map(|i| [i; 3]).collect();
        assert_eq!(*got.lock().unwrap(), want);
    }

    /// A write error (a closed pipe) comes back from a later write, as itself.
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
            if let Err(e) = w.write_all(b"x\n") {
                break e;
            }
            assert!(start.elapsed() < std::time::Duration::from_secs(10), "no error");
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}

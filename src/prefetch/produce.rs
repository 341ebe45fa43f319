//! The producers' side of the prefetcher: taking a slot, submitting its copies on
//! the thread's copy stream, pushes, and the pull-mode producer threads.

use super::{
    destroyed, timed_out, Entry, Fill, FillFn, FillOutcome, Prefetcher, SlotBuffers,
    SlotBuffersView, State, Ticket,
};
use crate::engine::ForeignOp;
use crate::error::{Error, ErrorCode, Result};
use crate::event::RecRef;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Numbers the threads that submit batches, from 0, for the choice of copy stream.
static PRODUCER_THREADS: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread's number among producer threads plus 1; 0 before its first submit.
    static PRODUCER_THREAD: Cell<u32> = const { Cell::new(0) };
}

/// This thread's number among the threads that submitted batches.
fn producer_thread() -> usize {
    PRODUCER_THREAD.with(|t| {
        if t.get() == 0 {
            t.set(
                PRODUCER_THREADS
                    .fetch_add(1, Ordering::Relaxed)
                    .wrapping_add(1)
                    .max(1),
            );
        }
        (t.get() - 1) as usize
    })
}

/// Batch 0 has its copies timed, then one batch in [`TIMED_EVERY`] once
/// [`TIMED_AFTER_BYTES`] were copied untimed since the last timed one: every eighth
/// batch of 1 MiB or more, about one in 48 of 200 KiB. A timed batch costs two
/// timing recordings on its copy stream, an elapsed-time query and a moment alone
/// on that stream; small batches are bound by such driver calls.
const TIMED_EVERY: u64 = 8;
pub(super) const TIMED_AFTER_BYTES: u64 = 8 << 20;

impl Prefetcher {
    /// Takes a free slot for a producer, blocking while all are busy (back-pressure)
    /// until `timeout` (None: no limit). Then waits for the slot's previous copy
    /// before its pinned memory is handed out (that wait has no timeout: the copy
    /// was enqueued at least `depth` batches earlier). The fill stays open until
    /// [`Prefetcher::submit`] or [`Prefetcher::cancel`].
    pub fn acquire(&self, timeout: Option<Duration>) -> Result<(Ticket, SlotBuffersView)> {
        let t0 = Instant::now();
        let deadline = timeout.map(|t| t0 + t);
        let mut st = self.lock();
        let slot = loop {
            if self.is_destroyed() {
                return Err(destroyed());
            }
            if st.input_closed {
                return Err(Error::new(
                    ErrorCode::InvalidState,
                    "the prefetcher's input is closed",
                ));
            }
            if let Some(s) = st.free.pop_front() {
                break s;
            }
            crate::trace::prefetch_blocked(&self.device, false);
            let (g, in_time) = self.slot_freed.wait(st, deadline);
            st = g;
            if !in_time {
                st.stats.producer_wait_ns += t0.elapsed().as_nanos() as u64;
                crate::trace::prefetch_waited(&self.device, false, t0);
                return Err(timed_out("waiting for a free prefetcher slot"));
            }
        };
        let seq = st.next_seq;
        st.next_seq += 1;
        st.pending.insert(seq, Entry::Filling(slot));
        let s = &mut st.slots[slot as usize];
        let ticket = Ticket {
            seq,
            slot,
            generation: s.generation,
        };
        let buffers = s.buffers.clone();
        let copied = s.copied.take();
        drop(st);
        // The pinned memory is free once the slot's previous copies, its only
        // readers, completed.
        if let Err(e) = buffers.pinned.iter().try_for_each(|p| p.sync.wait_write()) {
            let _ = self.finish(ticket, Entry::Failed(e.clone()));
            return Err(e);
        }
        let timed = copied.and_then(|(start, end, bytes)| {
            let ms = start.elapsed_ms(&end).ok()?;
            Some((ms as f64 / 1e3, bytes))
        });
        let mut st = self.lock();
        st.stats.producer_wait_ns += t0.elapsed().as_nanos() as u64;
        crate::trace::prefetch_waited(&self.device, false, t0);
        if self.is_destroyed() {
            self.abandon(&mut st, ticket);
            return Err(destroyed());
        }
        if let Some((secs, bytes)) = timed {
            st.copy_secs += secs;
            st.copy_timed_bytes += bytes;
        }
        Ok((ticket, SlotBuffersView(buffers)))
    }

    /// After a destroy, ends an open fill: `close` waits for every open fill, so that
    /// no producer writes into memory that was already freed.
    fn abandon(&self, st: &mut State, ticket: Ticket) {
        if matches!(st.pending.get(&ticket.seq), Some(Entry::Filling(x)) if *x == ticket.slot)
            && st
                .slots
                .get(ticket.slot as usize)
                .is_some_and(|s| s.generation == ticket.generation)
        {
            st.pending.remove(&ticket.seq);
            self.slot_freed.notify_all();
        }
    }

    /// Checks that `ticket` names a slot still filling under it; after a destroy,
    /// ends the fill and reports the destroy.
    fn check_open(&self, st: &mut State, ticket: Ticket) -> Result<()> {
        if self.is_destroyed() {
            self.abandon(st, ticket);
            return Err(destroyed());
        }
        Self::check_ticket(st, ticket)
    }

    /// Checks that `ticket` names a slot still filling under it.
    fn check_ticket(st: &State, ticket: Ticket) -> Result<()> {
        let ok = st.slots.get(ticket.slot as usize).is_some_and(|s| {
            s.generation == ticket.generation
                && matches!(st.pending.get(&ticket.seq), Some(Entry::Filling(x)) if *x == ticket.slot)
        });
        if !ok {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "prefetcher ticket for batch {} is not an open fill (submitted, cancelled or forged)",
                    ticket.seq
                ),
            ));
        }
        Ok(())
    }

    /// Ends a fill: the slot's entry becomes `entry`; a slot with no batch in it is
    /// free again.
    fn finish(&self, ticket: Ticket, entry: Entry) -> Result<()> {
        let mut st = self.lock();
        self.check_open(&mut st, ticket)?;
        self.end_fill(&mut st, ticket, entry);
        Ok(())
    }

    /// [`Prefetcher::finish`] for a caller that holds the lock and checked `ticket`.
    fn end_fill(&self, st: &mut State, ticket: Ticket, entry: Entry) {
        let slot = &mut st.slots[ticket.slot as usize];
        slot.generation = slot.generation.wrapping_add(1).max(1);
        if !matches!(entry, Entry::Ready(..)) {
            st.free.push_back(ticket.slot);
            self.slot_freed.notify_one();
        }
        st.pending.insert(ticket.seq, entry);
        self.batch_ready.notify_all();
    }

    /// Submits a filled slot: enqueues the H2D copy of each segment's first
    /// `lens[i]` bytes on the copy stream. A length over the capacity is an error
    /// for the submitter, and the consumer receives it in the batch's place.
    pub fn submit(&self, ticket: Ticket, lens: &[usize]) -> Result<()> {
        let bytes = lens.iter().fold(0u64, |a, &l| a.saturating_add(l as u64));
        let (buffers, timed) = {
            let mut st = self.lock();
            self.check_open(&mut st, ticket)?;
            let timed = ticket.seq % TIMED_EVERY == 0 && st.untimed_bytes >= TIMED_AFTER_BYTES;
            st.untimed_bytes = if timed {
                0
            } else {
                st.untimed_bytes.saturating_add(bytes)
            };
            (st.slots[ticket.slot as usize].buffers.clone(), timed)
        };
        if let Err(e) = self
            .check_lens(lens)
            .map_err(|e| e.context(format!("prefetcher batch {}", ticket.seq)))
        {
            let _ = self.finish(ticket, Entry::Failed(e.clone()));
            return Err(e);
        }
        match self.enqueue_copies(&buffers, lens, timed) {
            Ok(timing) => {
                let mut st = self.lock();
                self.check_open(&mut st, ticket)?;
                st.stats.bytes += bytes;
                st.slots[ticket.slot as usize].copied = timing.map(|(a, b)| (a, b, bytes));
                self.end_fill(&mut st, ticket, Entry::Ready(ticket.slot, lens.to_vec()));
                drop(st);
                crate::trace::prefetch_slot(
                    &self.copy_streams[0].0,
                    "submit",
                    ticket.seq,
                    ticket.slot,
                );
                Ok(())
            }
            Err(e) => {
                let e = e.context(format!("prefetcher batch {}", ticket.seq));
                let _ = self.finish(ticket, Entry::Failed(e.clone()));
                Err(e)
            }
        }
    }

    /// Checks one length per segment, each within its capacity; the caller adds
    /// which batch or call it was.
    fn check_lens(&self, lens: &[usize]) -> Result<()> {
        if lens.len() != self.capacities.len() {
            return Err(Error::invalid_argument(format!(
                "{} segment lengths for {} segments",
                lens.len(),
                self.capacities.len()
            )));
        }
        for (i, (&l, &c)) in lens.iter().zip(&self.capacities).enumerate() {
            if l > c {
                return Err(Error::out_of_range(format!(
                    "segment {i} has {l} bytes, over its capacity {c}"
                )));
            }
        }
        Ok(())
    }

    /// Enqueues one batch's copies as one foreign op on the copy stream; when
    /// `timed`, between two timing recordings, after the op's waits (for the
    /// consumer's release), so that the timing covers the copies alone.
    fn enqueue_copies(
        &self,
        b: &SlotBuffers,
        lens: &[usize],
        timed: bool,
    ) -> Result<Option<(RecRef, RecRef)>> {
        let (s, order) = &self.copy_streams[producer_thread() % self.copy_streams.len()];
        // A timed batch's copies alone between its two recordings on its stream;
        // untimed batches may interleave (each op's end is recorded after its own
        // copies).
        let (_alone, _shared);
        if timed {
            _alone = order.write().unwrap_or_else(|p| p.into_inner());
        } else {
            _shared = order.read().unwrap_or_else(|p| p.into_inner());
        }
        let reads = b.pinned.iter().map(|p| p.sync.clone()).collect();
        let writes = b.device.iter().map(|d| d.sync.clone()).collect();
        let op = ForeignOp::begin(s, reads, writes)?;
        let start = if timed { Some(s.record(true)?) } else { None };
        for (i, &len) in lens.iter().enumerate() {
            if len > 0 {
                let (dst, src) = (b.device[i].addr, b.pinned[i].addr);
                s.push(|| s.device.backend.memcpy_async(dst, src, len, s.raw))?;
            }
        }
        let timing = match start {
            Some(start) => Some((start, s.record(true)?)),
            None => None,
        };
        op.end()?;
        Ok(timing)
    }

    /// Gives a filled slot back unused: its sequence number is skipped.
    pub fn cancel(&self, ticket: Ticket) -> Result<()> {
        self.finish(ticket, Entry::Skipped)
    }

    /// Reports a producer's failure: the consumer receives `err` in the batch's place.
    pub fn fail(&self, ticket: Ticket, err: Error) -> Result<()> {
        self.finish(ticket, Entry::Failed(err))
    }

    /// Copies `segments` into a free slot's pinned memory and submits it. Blocks
    /// while every slot is busy, until `timeout`. Returns the batch's sequence number.
    pub fn push(&self, segments: &[&[u8]], timeout: Option<Duration>) -> Result<u64> {
        let lens: Vec<usize> = segments.iter().map(|s| s.len()).collect();
        // Bad lengths are the caller's error here; nothing is queued.
        self.check_lens(&lens).map_err(|e| e.context("push"))?;
        let (ticket, view) = self.acquire(timeout)?;
        for (seg, &(ptr, _)) in segments.iter().zip(view.host()) {
            // SAFETY: the slot's pinned memory is ours until submit, and its capacity
            // was checked above.
            let slot = unsafe { std::slice::from_raw_parts_mut(ptr, seg.len()) };
            super::stream_store::copy_streamed(slot, seg);
        }
        self.submit(ticket, &lens)?;
        Ok(ticket.seq)
    }

    /// Ends the input: `next` drains what is in flight, then reports end of data.
    /// Producers waiting for a slot return an error.
    pub fn close_input(&self) {
        let mut st = self.lock();
        st.input_closed = true;
        self.slot_freed.notify_all();
        self.batch_ready.notify_all();
    }

    /// Starts `threads` producer threads that fill slots with `fill` until it
    /// reports the end, or until the prefetcher closes.
    pub fn start_producers(self: &Arc<Self>, threads: u32, fill: FillFn) -> Result<()> {
        let mut producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        if !producers.is_empty() {
            return Err(Error::new(
                ErrorCode::InvalidState,
                "the prefetcher's producers are already running",
            ));
        }
        for i in 0..threads.max(1) {
            let pf = self.clone();
            let fill = fill.clone();
            let h = std::thread::Builder::new()
                .name(format!("sluice-prefetch-{i}"))
                .spawn(move || pf.produce(&*fill))
                .map_err(|e| Error::new(ErrorCode::OutOfMemory, format!("thread spawn: {e}")))?;
            producers.push(h);
        }
        Ok(())
    }

    fn produce(&self, fill: &(dyn Fn(&mut Fill<'_>) -> FillOutcome + Send + Sync)) {
        while let Ok((ticket, view)) = self.acquire(None) {
            let mut lens = vec![0usize; self.capacities.len()];
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fill(&mut Fill {
                    ticket,
                    host: view.host(),
                    len: &mut lens,
                })
            }))
            .unwrap_or_else(|_| FillOutcome::Failed("the fill callback panicked".into()));
            match outcome {
                FillOutcome::Ready => {
                    let _ = self.submit(ticket, &lens);
                }
                FillOutcome::End => {
                    let _ = self.cancel(ticket);
                    self.close_input();
                }
                FillOutcome::Failed(msg) => {
                    let _ = self.fail(
                        ticket,
                        Error::new(
                            ErrorCode::CallbackFailed,
                            format!("prefetcher batch {}: fill failed: {msg}", ticket.seq),
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::MAX_COPY_STREAMS;
    use super::*;
    use crate::device::Device;
    use crate::stream::{Stream, STREAM_NON_BLOCKING};

    #[test]
    fn producers_on_different_threads_copy_on_different_streams() {
        const PER_THREAD: u64 = 64;
        let dev = Device::open_default().unwrap();
        let pf = Prefetcher::create(&dev, 4, &[8]).unwrap();
        assert_eq!(pf.copy_streams.len(), MAX_COPY_STREAMS);
        let producers: Vec<_> = (0..4u8)
            .map(|t| {
                let pf = pf.clone();
                std::thread::spawn(move || {
                    for _ in 0..PER_THREAD {
                        pf.push(&[&[t; 8]], None).unwrap();
                    }
                })
            })
            .collect();
        let s = Stream::create(&dev, STREAM_NON_BLOCKING, 0).unwrap();
        let mut per_thread = [0u64; 4];
        for _ in 0..4 * PER_THREAD {
            let v = pf.next(&s, None).map_err(|e| e.error).unwrap();
            let mut byte = [0u8; 1];
            crate::ops::copy_to_host(&s, &mut byte, &v.buffers[0], 0).unwrap();
            per_thread[byte[0] as usize] += 1;
            pf.release(v.seq).unwrap();
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(per_thread, [PER_THREAD; 4], "every batch arrived once");
        let recorded: Vec<u64> = pf.copy_streams.iter().map(|(s, _)| s.last_seq()).collect();
        assert!(
            recorded.iter().filter(|&&n| n > 0).count() >= 2,
            "four producer threads used one copy stream: {recorded:?}"
        );
        assert!(
            recorded.iter().sum::<u64>() >= 4 * PER_THREAD,
            "{recorded:?}"
        );
        pf.close();
    }
}

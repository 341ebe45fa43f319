//! The consumers' side of the prefetcher: taking the next batch, leasing it on a
//! stream, releasing it, and graph mode's copy into fixed buffers.

use super::{
    destroyed, timed_out, BatchView, Entry, Lease, NextError, NextResult, Prefetcher, SlotBuffers,
};
use crate::engine::ForeignOp;
use crate::error::{Error, ErrorCode, Result};
use crate::memory::Buffer;
use crate::ops;
use crate::stream::Stream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A batch taken by a consumer: its sequence number, slot, lengths and buffers.
type Taken = (u64, u32, Vec<usize>, Arc<SlotBuffers>);

impl Prefetcher {
    /// Waits for the oldest batch: its sequence number, slot, lengths and buffers.
    fn take_next(&self, timeout: Option<Duration>) -> NextResult<Taken> {
        let t0 = Instant::now();
        let deadline = timeout.map(|t| t0 + t);
        let mut st = self.lock();
        let r = loop {
            if self.is_destroyed() {
                break Err(destroyed().into());
            }
            let seq = st.next_out;
            match st.pending.get(&seq) {
                Some(Entry::Filling(_)) => {}
                Some(_) => {
                    st.next_out += 1;
                    match st.pending.remove(&seq) {
                        Some(Entry::Ready(slot, lens)) => {
                            let buffers = st.slots[slot as usize].buffers.clone();
                            break Ok((seq, slot, lens, buffers));
                        }
                        Some(Entry::Failed(error)) => {
                            break Err(NextError {
                                error,
                                seq: Some(seq),
                            })
                        }
                        _ => continue,
                    }
                }
                None if st.input_closed && st.pending.is_empty() => {
                    break Err(Error::new(
                        ErrorCode::EndOfData,
                        "the prefetcher's input is closed and every batch was consumed",
                    )
                    .into());
                }
                None => {}
            }
            crate::trace::prefetch_blocked(&self.device, true);
            let (g, in_time) = self.batch_ready.wait(st, deadline);
            st = g;
            if !in_time {
                break Err(timed_out("waiting for the next prefetched batch").into());
            }
        };
        st.stats.consumer_wait_ns += t0.elapsed().as_nanos() as u64;
        crate::trace::prefetch_waited(&self.device, true, t0);
        if r.is_ok() {
            st.stats.batches += 1;
        }
        r
    }

    fn view(seq: u64, slot: u32, lens: &[usize], b: &SlotBuffers) -> BatchView {
        BatchView {
            seq,
            slot,
            segments: b
                .device
                .iter()
                .zip(lens)
                .map(|(d, &l)| (d.addr, l))
                .collect(),
            buffers: b.device.clone(),
        }
    }

    /// The oldest ready batch, leased to work on `stream`: the stream waits on the
    /// device for the batch's copy (the host does not), and kernels that name the
    /// segments' sync objects are tracked. Release it with [`Prefetcher::release`].
    pub fn next(&self, stream: &Arc<Stream>, timeout: Option<Duration>) -> NextResult<BatchView> {
        self.device
            .same_device(&stream.device, "the consumer stream")?;
        let (seq, slot, lens, buffers) = self.take_next(timeout)?;
        let op = match ForeignOp::begin(stream, self.syncs[slot as usize].clone(), Vec::new()) {
            Ok(op) => op,
            Err(e) => {
                self.lock().free.push_back(slot);
                self.slot_freed.notify_one();
                return Err(NextError {
                    error: e.context(format!("prefetcher batch {seq}")),
                    seq: Some(seq),
                });
            }
        };
        {
            let mut leases = self.lock_leases();
            // close sets the flag before it takes the leases.
            if self.is_destroyed() {
                drop(leases);
                drop(op);
                return Err(destroyed().into());
            }
            leases.insert(
                seq,
                Lease {
                    slot,
                    op,
                    buffers: buffers.clone(),
                },
            );
        }
        crate::trace::prefetch_slot(&self.copy_streams[0].0, "next", seq, slot);
        Ok(Self::view(seq, slot, &lens, &buffers))
    }

    /// Releases a leased batch, in stream order: the slot is refilled only after
    /// the work enqueued on the consumer's stream so far has completed.
    pub fn release(&self, seq: u64) -> Result<()> {
        let Lease { slot, op, buffers } = {
            let mut leases = self.lock_leases();
            // close sets the flag before it takes the leases: a lease it took reads
            // as closed, not as never leased.
            if self.is_destroyed() {
                return Err(destroyed());
            }
            leases.remove(&seq).ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidState,
                    format!("prefetcher batch {seq} is not leased"),
                )
            })?
        };
        let ended = op.end();
        drop(buffers);
        crate::trace::prefetch_slot(&self.copy_streams[0].0, "release", seq, slot);
        let mut st = self.lock();
        if !self.is_destroyed() {
            st.free.push_back(slot);
            self.slot_freed.notify_one();
        }
        ended
    }

    /// Graph mode: copies the oldest batch, device to device as a tracked op on
    /// `stream`, into `dst` (one buffer per segment, each at least as large as the
    /// segment's length), and releases it at once in stream order.
    pub fn next_into(
        &self,
        stream: &Arc<Stream>,
        dst: &[&Buffer],
        timeout: Option<Duration>,
    ) -> NextResult<BatchView> {
        if dst.len() != self.capacities.len() {
            return Err(Error::invalid_argument(format!(
                "next_into: {} destination buffers for {} segments",
                dst.len(),
                self.capacities.len()
            ))
            .into());
        }
        // Checked before a batch is taken: an error here consumes none.
        self.device
            .same_device(&stream.device, "the consumer stream")?;
        for (i, (d, &c)) in dst.iter().zip(&self.capacities).enumerate() {
            self.device
                .same_device_with(&d.device, || format!("next_into: destination {i}, {d:?}"))?;
            if d.size < c {
                return Err(Error::out_of_range(format!(
                    "next_into: destination {i} holds {} bytes, under the segment's capacity {c}",
                    d.size
                ))
                .into());
            }
        }
        let (seq, slot, lens, buffers) = self.take_next(timeout)?;
        let pairs: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| (dst[i], &*buffers.device[i], len))
            .collect();
        let copied = ops::copy_all(stream, &pairs);
        let mut st = self.lock();
        if self.is_destroyed() {
            return Err(destroyed().into());
        }
        let view = Self::view(seq, slot, &lens, &buffers);
        crate::trace::prefetch_slot(&self.copy_streams[0].0, "next_into", seq, slot);
        {
            st.free.push_back(slot);
            self.slot_freed.notify_one();
        }
        // The batch was taken: its error names it.
        copied.map(|()| view).map_err(|error| NextError {
            error: error.context(format!("prefetcher batch {seq}")),
            seq: Some(seq),
        })
    }
}

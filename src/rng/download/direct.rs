//! The direct path: the caller's buffer is page-locked. On CUDA with the CRC
//! kernel, one bulk copy and the checksum from the device beside it; otherwise
//! pieces copied straight into the buffer, shrinking towards the end, each chunk
//! checksummed on host threads once its piece landed.

use super::pool::{pool, run};
use super::{copy_piece, drain_after_failure, finish, threads_for, Dst, Failure, Landed, CHUNK};
use crate::error::Result;
use crate::event::RecRef;
use crate::memory::Buffer;
use crate::rng::device::DeviceCrc;
use crate::stream::Stream;
use crate::sync::access_set;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// Direct pieces, from the end: the last one this big, each earlier one twice the
/// next, up to the max.
const LAST_PIECE: usize = 256 << 10;
const DIRECT_PIECE_MAX: usize = 16 << 20;

/// One bulk copy of `len` bytes of `src` into the caller's page-locked `dst` on
/// `io`; beside it, on the CRC stream, the CRC kernel over the same bytes into a
/// zeroed device word, copied into `word` (page-locked). Both wait for the last
/// write of `src` and nothing else. Returns the raw CRC.
pub(super) fn with_device_crc(
    src: &Buffer,
    io: &Stream,
    dc: &DeviceCrc,
    dst: u64,
    len: usize,
    word: &mut [u8],
) -> Result<u32> {
    let data = src.range(0, len, "checkpoint")?;
    let copied = copy_piece(src, io, 0, dst, len, None)?;
    let waited = crc_into_word(src, dc, data, len, word).and_then(|(summed, _scratch)| {
        // Two streams, one copy each; the scratch word is freed once both landed.
        let fail = Failure::default();
        for rec in [copied, summed] {
            Landed::new(&[rec]).wait(0, &fail)?;
        }
        Ok(())
    });
    if let Err(e) = waited {
        drain_after_failure(io);
        drain_after_failure(&dc.stream);
        return Err(e);
    }
    Ok(u32::from_le_bytes([word[0], word[1], word[2], word[3]]))
}

/// On the CRC stream: a zeroed device word, the kernel over `len` bytes at `data`
/// (of `src`) into it, and its copy into `word`. Returns the copy's recording and
/// the word.
fn crc_into_word(
    src: &Buffer,
    dc: &DeviceCrc,
    data: u64,
    len: usize,
    word: &mut [u8],
) -> Result<(Option<RecRef>, Arc<Buffer>)> {
    let scratch = Buffer::alloc(&dc.stream, 4)?;
    crate::ops::memset(&dc.stream, &scratch, 0, 0, 4)?;
    let (r, w) = ([src.sync.clone()], [scratch.sync.clone()]);
    dc.launch(data, len, scratch.addr, &access_set(&r, &w))?;
    let rec = copy_piece(&scratch, &dc.stream, 0, word.as_mut_ptr() as u64, 4, None)?;
    Ok((rec, scratch))
}

/// The direct path: every piece copied straight into the caller's page-locked
/// buffer, then each chunk checksummed once its piece completed.
pub(super) fn into(
    src: &Buffer,
    io: &Stream,
    dst: usize,
    len: usize,
    crcs: &[AtomicU32],
) -> Result<()> {
    let parallel = threads_for(len);
    if parallel {
        pool().prewake(); // helpers wake while the copies are issued
    }
    let starts = direct_starts(len);
    let mut recs: Vec<Option<RecRef>> = Vec::with_capacity(starts.len());
    for (k, &off) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(len);
        match copy_piece(src, io, off, (dst + off) as u64, end - off, None) {
            Ok(r) => recs.push(r),
            Err(e) => {
                drain_after_failure(io);
                return Err(e);
            }
        }
    }
    let landed = Landed::new(&recs);
    let next = AtomicUsize::new(0);
    let fail = Failure::default();
    let dst = Dst(dst);
    let work = || {
        while !fail.any() {
            let j = next.fetch_add(1, Ordering::Relaxed);
            if j >= crcs.len() {
                break;
            }
            let off = j * CHUNK;
            let k = starts.partition_point(|&s| s <= off) - 1;
            match landed.wait(k, &fail) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    fail.set(e);
                    break;
                }
            }
            // SAFETY: chunk j lies in piece k, whose copy completed; chunk j is
            // this thread's alone (claimed above).
            let bytes = unsafe { dst.slice(off, (len - off).min(CHUNK)) };
            crcs[j].store(crc32c::crc32c(bytes), Ordering::Relaxed);
        }
    };
    let panicked = run(parallel, &work);
    finish(io, panicked, &fail).0
}

/// The direct pieces' offsets: from the end, [`LAST_PIECE`] bytes (and the partial
/// chunk), then each piece twice the next up to [`DIRECT_PIECE_MAX`]; a rest under
/// two pieces joins the first. Chunk-aligned, increasing, from 0.
fn direct_starts(len: usize) -> Vec<usize> {
    let mut starts = Vec::new();
    let (mut end, mut size) = (len, LAST_PIECE);
    while end > 0 {
        end = if end < 2 * size {
            0
        } else {
            (end - size) / CHUNK * CHUNK
        };
        starts.push(end);
        size = (2 * size).min(DIRECT_PIECE_MAX);
    }
    starts.reverse();
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_pieces_shrink_to_the_end_and_cover_the_checkpoint() {
        for len in [
            1,
            CHUNK - 1,
            LAST_PIECE,
            2 * LAST_PIECE - 1,
            2 * LAST_PIECE,
            (4 << 20) + 36,
            (64 << 20) + 5,
            256 << 20,
        ] {
            let s = direct_starts(len);
            assert_eq!(s[0], 0, "{len}");
            assert!(s.iter().all(|&o| o % CHUNK == 0), "{len}: {s:?}");
            assert!(s.windows(2).all(|w| w[0] < w[1]), "{len}: {s:?}");
            let sizes: Vec<usize> = s
                .iter()
                .zip(s.iter().skip(1).chain([&len]))
                .map(|(a, b)| b - a)
                .collect();
            let last = *sizes.last().unwrap();
            assert!(
                last >= len.min(LAST_PIECE) && last < 2 * LAST_PIECE + CHUNK,
                "{len}: {sizes:?}"
            );
            // Each piece at most twice the next (the first, under two pieces' worth, more).
            assert!(
                sizes[1..].windows(2).all(|w| w[0] <= 2 * w[1]),
                "{len}: {sizes:?}"
            );
            assert!(
                sizes[1..].iter().all(|&p| p <= DIRECT_PIECE_MAX),
                "{len}: {sizes:?}"
            );
        }
        assert_eq!(direct_starts(4 << 20).len(), 4);
    }
}

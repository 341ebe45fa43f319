//! Writes into a slot's pinned memory with non-temporal stores. A producer refills
//! a slot whose lines the device's copy read since the last fill, so they are no
//! longer in the CPU's caches; a plain store reads each line from memory before
//! writing it, which took half of a slot's fill on the H200's hosts (run 306).
//! Streaming stores skip that read and go straight to memory, where the next H2D
//! copy reads them. x86-64 only (SSE2 is part of its base); elsewhere a plain copy.

use crate::error::{Error, Result};

/// Copies shorter than this are plain: the fence would cost more than the stores.
const STREAM_MIN: usize = 256;
/// How many rows ahead `gather_rows` prefetches its source, so several misses are
/// in flight (the Go trainer's measured figure).
const PREFETCH_ROWS_AHEAD: usize = 8;

/// Copies `src` into `dst` (of the same length), streaming where it is long enough.
pub(crate) fn copy_streamed(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_streamed: lengths differ");
    if src.len() < STREAM_MIN {
        dst.copy_from_slice(src);
        return;
    }
    stream_row(dst, src);
    fence();
}

/// Copies rows `rows` (of `row_bytes` each) of `src` into `dst` one after another,
/// with streaming stores on x86-64 (`sluice_gather_rows`). Every index is checked
/// before anything is written; on an error `dst` is unchanged.
pub fn gather_rows(dst: &mut [u8], src: &[u8], row_bytes: usize, rows: &[i64]) -> Result<()> {
    if row_bytes == 0 {
        return Err(Error::invalid_argument("row_bytes is 0"));
    }
    let need = rows
        .len()
        .checked_mul(row_bytes)
        .filter(|&n| n <= dst.len())
        .ok_or_else(|| {
            Error::out_of_range(format!(
                "{} rows of {row_bytes} bytes do not fit in the destination's {} bytes",
                rows.len(),
                dst.len()
            ))
        })?;
    let src_rows = src.len() / row_bytes;
    if let Some((i, &r)) = rows
        .iter()
        .enumerate()
        .find(|&(_, &r)| r < 0 || r as u64 >= src_rows as u64)
    {
        return Err(Error::out_of_range(format!(
            "rows[{i}] is {r}, outside the source's {src_rows} rows"
        )));
    }
    let src_row = |r: i64| &src[r as usize * row_bytes..][..row_bytes];
    for (i, (d, &r)) in dst[..need]
        .chunks_exact_mut(row_bytes)
        .zip(rows)
        .enumerate()
    {
        if let Some(&ahead) = rows.get(i + PREFETCH_ROWS_AHEAD) {
            prefetch(src_row(ahead).as_ptr());
        }
        stream_row(d, src_row(r));
    }
    fence();
    Ok(())
}

/// Copies one row, streaming its 16-byte aligned body; no fence.
fn stream_row(dst: &mut [u8], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        let head = dst.as_ptr().align_offset(16).min(dst.len());
        let body = (dst.len() - head) & !15;
        dst[..head].copy_from_slice(&src[..head]);
        // SAFETY: both ranges are in bounds (body ≤ len - head), dst + head is 16-byte
        // aligned, SSE2 is in x86-64's base, and the loads take unaligned addresses.
        unsafe {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128};
            let (d, s) = (dst.as_mut_ptr().add(head), src.as_ptr().add(head));
            for k in (0..body).step_by(16) {
                let v = _mm_loadu_si128(s.add(k).cast::<__m128i>());
                #[cfg(not(miri))]
                std::arch::x86_64::_mm_stream_si128(d.add(k).cast::<__m128i>(), v);
                // Miri cannot run the streaming store's inline assembly; an aligned
                // store checks the same bounds and alignment.
                #[cfg(miri)]
                d.add(k).cast::<__m128i>().write(v);
            }
        }
        dst[head + body..].copy_from_slice(&src[head + body..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Orders the streaming stores before what follows (the submit that queues the copy).
fn fence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: SSE is in x86-64's base.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    // Miri runs the streamed path (its stores are plain ones there) without `sfence`.
    #[cfg(miri)]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint and never faults; SSE is in x86-64's base.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn pattern(n: usize, salt: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
            .collect()
    }

    #[test]
    fn streamed_copies_equal_the_source_at_every_alignment_and_length() {
        let src = pattern(5000, 7);
        let mut dst = vec![0u8; 5100];
        for off in 0..17 {
            for len in [0, 1, 15, 16, 17, 255, 256, 257, 1000, 4096, 4099] {
                dst.fill(0xEE);
                copy_streamed(&mut dst[off..off + len], &src[3..3 + len]);
                assert_eq!(
                    &dst[off..off + len],
                    &src[3..3 + len],
                    "off {off} len {len}"
                );
                assert!(
                    dst[..off].iter().all(|&b| b == 0xEE),
                    "before, off {off} len {len}"
                );
                assert!(
                    dst[off + len..].iter().all(|&b| b == 0xEE),
                    "after, off {off} len {len}"
                );
            }
        }
    }

    #[test]
    fn gathered_rows_match_the_rows_named() {
        for row in [1usize, 4, 15, 16, 784, 1000] {
            let src = pattern(row * 50, row as u8);
            let rows: Vec<i64> = (0..23).map(|i| (i * 37 % 50) as i64).collect();
            for off in [0usize, 1, 8] {
                let mut dst = vec![0xEEu8; off + rows.len() * row + 5];
                gather_rows(&mut dst[off..], &src, row, &rows).unwrap();
                for (i, &r) in rows.iter().enumerate() {
                    let r = r as usize;
                    assert_eq!(
                        &dst[off + i * row..][..row],
                        &src[r * row..][..row],
                        "row {row} i {i}"
                    );
                }
                assert!(dst[..off].iter().all(|&b| b == 0xEE));
                assert!(dst[off + rows.len() * row..].iter().all(|&b| b == 0xEE));
            }
        }
    }

    #[test]
    fn bad_gathers_name_the_fault_and_write_nothing() {
        let src = pattern(16 * 10, 1);
        let mut dst = vec![0xEEu8; 16 * 4];
        let cases: [(usize, &[i64], ErrorCode, &str); 5] = [
            (
                16,
                &[0, 1, 10],
                ErrorCode::OutOfRange,
                "rows[2] is 10, outside the source's 10 rows",
            ),
            (16, &[0, -1], ErrorCode::OutOfRange, "rows[1] is -1"),
            (
                16,
                &[0, 1, 2, 3, 4],
                ErrorCode::OutOfRange,
                "5 rows of 16 bytes do not fit",
            ),
            (0, &[0], ErrorCode::InvalidArgument, "row_bytes is 0"),
            (usize::MAX, &[0, 0], ErrorCode::OutOfRange, "do not fit"),
        ];
        for (row, rows, code, text) in cases {
            let e = gather_rows(&mut dst, &src, row, rows).unwrap_err();
            assert_eq!(e.code, code, "{text}");
            assert!(e.message.contains(text), "{} lacks {text}", e.message);
            assert!(dst.iter().all(|&b| b == 0xEE), "{text}: dst was written");
        }
        gather_rows(&mut dst, &src, 16, &[]).unwrap();
        assert!(dst.iter().all(|&b| b == 0xEE));
    }
}

//! Writes into a slot's pinned memory. A producer refills a slot whose lines the
//! device's copy read since the last fill. When another thread filled it last, or
//! so much was filled since that its lines left the cache, a plain store reads each
//! line back before writing it, which took half of a slot's fill on the H200's hosts
//! with four producers (run 306); streaming stores skip that read and go straight to
//! memory, where the next H2D copy reads them. When this thread filled it last and
//! little was filled since (a lone producer's small ring), its lines are still in
//! this core's cache and plain stores are faster (0.68x streamed, run 308). Streaming
//! is x86-64 only (SSE2 is part of its base); elsewhere every copy is plain.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

/// Copies shorter than this are plain: the fence would cost more than the stores.
const STREAM_MIN: usize = 256;
/// How many rows ahead `gather_rows` prefetches its source, so several misses are
/// in flight (the Go trainer's measured figure).
const PREFETCH_ROWS_AHEAD: usize = 8;

/// Recent fills by destination address (hashed; a collision only costs a wrong
/// guess): the filling thread's tag and the process's fill counter then.
static LAST_FILLS: [AtomicU64; FILL_TABLE] = [const { AtomicU64::new(0) }; FILL_TABLE];
const FILL_TABLE: usize = 1024;
/// Bytes filled by the process, in 64-byte units.
static FILLED: AtomicU64 = AtomicU64::new(0);
/// A table entry: the thread's tag in the top bits, the counter in the rest.
const STAMP_BITS: u32 = 44;
const STAMP_MASK: u64 = (1 << STAMP_BITS) - 1;

/// Half the largest cache of CPU 0 (from sysfs; 8 MiB where it is not known):
/// a destination filled this many bytes ago is taken to have left the cache.
static CACHED_LIMIT: LazyLock<u64> =
    LazyLock::new(|| last_level_cache_bytes().map(|b| b / 2).unwrap_or(8 << 20));

fn last_level_cache_bytes() -> Option<u64> {
    (0..8)
        .filter_map(|i| {
            let path = format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size");
            parse_cache_size(std::fs::read_to_string(path).ok()?.trim())
        })
        .max()
}

/// "32768K" → bytes.
fn parse_cache_size(s: &str) -> Option<u64> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "" => n,
        "K" => n << 10,
        "M" => n << 20,
        "G" => n << 30,
        _ => return None,
    })
}

/// Notes a fill of `len` bytes at `dst` by this thread; true when it should stream.
fn fill_streams(dst: *const u8, len: usize) -> bool {
    let me = crate::tls::call(|c| c as *const _ as usize);
    streams_after(&LAST_FILLS, &FILLED, dst as usize, len, me, *CACHED_LIMIT)
}

/// The choice of [`fill_streams`] over `table` (of a power of two entries) and
/// `filled`: stream unless thread
/// `me` filled `dst` last, fewer than `limit` bytes ago (by the process's count).
fn streams_after(
    table: &[AtomicU64],
    filled: &AtomicU64,
    dst: usize,
    len: usize,
    me: usize,
    limit: u64,
) -> bool {
    let tag = (me as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> STAMP_BITS;
    let now = filled.fetch_add(len.div_ceil(64) as u64, Ordering::Relaxed) & STAMP_MASK;
    // Fibonacci hashing of the line address spreads a ring's evenly spaced slots.
    let bits = table.len().trailing_zeros();
    let key = ((dst as u64 >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize;
    let entry = &table[key];
    let prev = entry.swap(tag << STAMP_BITS | now, Ordering::Relaxed);
    let mine = prev != 0 && prev >> STAMP_BITS == tag;
    let since = now.wrapping_sub(prev & STAMP_MASK) & STAMP_MASK;
    !(mine && since.saturating_mul(64) < limit)
}

/// Copies `src` into a slot `dst` of the same length, streaming where
/// [`fill_streams`] says and the copy is long enough.
pub(crate) fn copy_into_slot(dst: &mut [u8], src: &[u8]) {
    let streamed = src.len() >= STREAM_MIN && fill_streams(dst.as_ptr(), dst.len());
    copy_with(dst, src, streamed);
}

fn copy_with(dst: &mut [u8], src: &[u8], streamed: bool) {
    assert_eq!(dst.len(), src.len(), "copy_into_slot: lengths differ");
    if !streamed {
        dst.copy_from_slice(src);
        return;
    }
    stream_row(dst, src);
    fence();
}

/// Copies rows `rows` (of `row_bytes` each) of `src` into `dst` one after another
/// (`sluice_gather_rows`), streaming where [`fill_streams`] says. Every index is
/// checked before anything is written; on an error `dst` is unchanged.
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
    let streamed = need >= STREAM_MIN && fill_streams(dst.as_ptr(), need);
    gather_with(&mut dst[..need], src, row_bytes, rows, streamed);
    Ok(())
}

/// `gather_rows` after its checks: `dst` holds exactly `rows`.
fn gather_with(dst: &mut [u8], src: &[u8], row_bytes: usize, rows: &[i64], streamed: bool) {
    let src_row = |r: i64| &src[r as usize * row_bytes..][..row_bytes];
    for (i, (d, &r)) in dst.chunks_exact_mut(row_bytes).zip(rows).enumerate() {
        if let Some(&ahead) = rows.get(i + PREFETCH_ROWS_AHEAD) {
            prefetch(src_row(ahead).as_ptr());
        }
        if streamed {
            stream_row(d, src_row(r));
        } else {
            d.copy_from_slice(src_row(r));
        }
    }
    if streamed {
        fence();
    }
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
        // The plain path is `copy_from_slice`; the streamed one is checked here.
        let src = pattern(5000, 7);
        let mut dst = vec![0u8; 5100];
        for off in 0..17 {
            for len in [0, 1, 15, 16, 17, 255, 256, 257, 1000, 4096, 4099] {
                dst.fill(0xEE);
                copy_with(&mut dst[off..off + len], &src[3..3 + len], true);
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
        for (row, streamed) in [1usize, 4, 15, 16, 784, 1000]
            .into_iter()
            .flat_map(|r| [(r, true), (r, false)])
        {
            let src = pattern(row * 50, row as u8);
            let rows: Vec<i64> = (0..23).map(|i| (i * 37 % 50) as i64).collect();
            for off in [0usize, 1, 8] {
                let mut dst = vec![0xEEu8; off + rows.len() * row + 5];
                let n = rows.len() * row;
                gather_with(&mut dst[off..off + n], &src, row, &rows, streamed);
                for (i, &r) in rows.iter().enumerate() {
                    let r = r as usize;
                    assert_eq!(
                        &dst[off + i * row..][..row],
                        &src[r * row..][..row],
                        "row {row} i {i} streamed {streamed}"
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

    #[test]
    fn a_fill_streams_unless_its_thread_filled_the_same_slot_recently() {
        let table: Vec<AtomicU64> = (0..FILL_TABLE).map(|_| AtomicU64::new(0)).collect();
        let filled = AtomicU64::new(0);
        let (a, b, limit) = (0x1000usize, 0x2000usize, 4 << 20);
        let fill = |dst, len, me| streams_after(&table, &filled, dst, len, me, limit);
        assert!(fill(0x10_0000, 4096, a), "a first fill streams");
        assert!(
            !fill(0x10_0000, 4096, a),
            "the same thread again, 4 KiB later: plain"
        );
        assert!(fill(0x10_0000, 4096, b), "another thread's fill streams");
        assert!(
            fill(0x10_0000, 4096, a),
            "and so does the first thread's after it"
        );
        assert!(
            fill(0x20_0000, 4096, a),
            "another slot, first seen: streams"
        );
        // A lone producer's ring of 2 MiB, within the 4 MiB limit: each slot is
        // filled again 2 MiB later.
        for round in 0..3 {
            for slot in 0..8usize {
                let streamed = fill(0x100_0000 + slot * (256 << 10), 256 << 10, a);
                assert_eq!(streamed, round == 0, "round {round} slot {slot}");
            }
        }
        // The same ring with a 1 MiB limit: its slots have left the cache.
        let streams = |dst| streams_after(&table, &filled, dst, 256 << 10, a, 1 << 20);
        assert!((0..8).all(|slot| streams(0x100_0000 + slot * (256 << 10))));
    }

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("12Q"), None);
        assert_eq!(parse_cache_size(""), None);
    }
}

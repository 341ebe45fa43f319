//! Filling a prefetcher slot: rows gathered by index with streaming stores.

use super::*;
use crate::error::Error;
use std::ffi::c_void;

/// Copies rows `rows[0..num_rows)` of `src` (`src_len` bytes, rows of `row_bytes`
/// each) into `dst` one after another: a batch gathered from a dataset by index,
/// into a slot from `sluice_prefetcher_acquire` or a fill callback. On x86-64 the
/// stores are non-temporal and fenced before return: the slot's lines, read by the
/// last H2D copy, are not read again before they are written, which a plain copy
/// does (a lone producer whose slots stay cached may gather faster with plain
/// copies). Needs `num_rows * row_bytes <= dst_capacity`; `dst` and `src` must not
/// overlap. Every index is checked first: on an error nothing is written. Thread
/// safety: any thread, on distinct destinations.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`dst`, `src` or `rows` NULL with a length
/// over 0); `SLUICE_ERROR_INVALID_ARGUMENT` (`row_bytes` 0, or `dst` overlapping
/// `src`); `SLUICE_ERROR_OUT_OF_RANGE` (the rows do not fit in `dst_capacity`, or an
/// index is negative or not below `src_len / row_bytes`).
#[no_mangle]
pub extern "C" fn sluice_gather_rows(
    dst: *mut c_void,
    dst_capacity: usize,
    src: *const c_void,
    src_len: usize,
    row_bytes: usize,
    rows: *const i64,
    num_rows: usize,
) -> *mut sluice_error_t {
    boundary("sluice_gather_rows", || {
        let rows = slice_in(rows, num_rows, "rows")?;
        let src = slice_in(src.cast::<u8>(), src_len, "src")?;
        // Checked as shared first: a `&mut` over `src` would be undefined.
        slice_in(dst.cast_const().cast::<u8>(), dst_capacity, "dst")?;
        let (d, s) = (dst as usize, src.as_ptr() as usize);
        if dst_capacity > 0
            && !src.is_empty()
            && d < s.saturating_add(src.len())
            && s < d.saturating_add(dst_capacity)
        {
            return Err(Error::invalid_argument("dst overlaps src"));
        }
        let dst = slice_out(dst.cast::<u8>(), dst_capacity, "dst")?;
        crate::prefetch::gather_rows(dst, src, row_bytes, rows)
    })
}

//! CRC32C arithmetic for checkpoint serialization: carrying a CRC past bytes
//! (a multiplication by a power of x modulo the polynomial), continuing a CRC over
//! a raw one (the device kernel's result), and folding chunk CRCs (the host
//! threads' results) into one.

use super::download::CHUNK;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{LazyLock, OnceLock};

const POLY: u32 = 0x82F6_3B78;

/// `x^(8 * 2^k) mod P` for k < 48, reflected (bit 31 is `x^0`): appending `2^k`
/// bytes to a message multiplies its raw CRC32C by `x8[k]`. The device kernel
/// gets it by value (`sluice_crc_powers` in `kernels/rng.cu`).
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct Powers {
    x8: [u32; 48],
}

/// The table, computed once.
pub(super) fn powers() -> &'static Powers {
    static POWERS: LazyLock<Powers> = LazyLock::new(|| {
        // x^1, squared three times: x^8.
        let mut x = 1u32 << 30;
        for _ in 0..3 {
            x = mulmod(x, x);
        }
        let mut x8 = [0u32; 48];
        for e in x8.iter_mut() {
            *e = x;
            x = mulmod(x, x);
        }
        Powers { x8 }
    });
    &POWERS
}

/// `a * b mod P`, both reflected.
fn mulmod(a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    for i in 0..32 {
        if a >> (31 - i) & 1 == 1 {
            p ^= b;
        }
        b = (b >> 1) ^ if b & 1 == 1 { POLY } else { 0 };
    }
    p
}

/// `a` carried past `len` zero bytes of raw CRC32C (`a * x^(8 len) mod P`):
/// what `crc32c::crc32c_combine(a, 0, len)` gives, in a microsecond rather than
/// tens (that one squares a bit matrix per length bit).
pub(super) fn shift(mut a: u32, len: usize) -> u32 {
    let x8 = &powers().x8;
    let mut rest = len as u64;
    let mut k = 0;
    while rest != 0 {
        if rest & 1 == 1 {
            a = mulmod(x8[k], a);
        }
        rest >>= 1;
        k += 1;
    }
    a
}

/// The CRC32C of `new ‖ rest` from that of `old ‖ rest` (`old` and `new` of one
/// length, `rest` of `rest_len` bytes): the two differ by the raw CRC of
/// `old ^ new` carried past `rest`.
pub(super) fn replace_prefix(crc: u32, old: &[u8], new: &[u8], rest_len: usize) -> u32 {
    let diff: Vec<u8> = old.iter().zip(new).map(|(a, b)| a ^ b).collect();
    let raw = crc32c::crc32c(&diff) ^ crc32c::crc32c(&vec![0; diff.len()]);
    crc ^ shift(raw, rest_len)
}

/// The CRC32C continued from `crc` over `len` bytes whose raw CRC (zero initial
/// value, no final XOR) is `raw`: the register `!crc` carried past `len` bytes,
/// plus `raw`.
pub(super) fn append_raw(crc: u32, raw: u32, len: usize) -> u32 {
    !(shift(!crc, len) ^ raw)
}

/// Continues `crc` over the chunks' CRCs, in order. Full groups of [`GROUP`]
/// chunks fold alone first (chains the CPU overlaps), then into `crc`.
pub(super) fn fold(mut crc: u32, crcs: &[AtomicU32], len: usize) -> u32 {
    let (one, group) = shifts();
    let groups = len / (GROUP * CHUNK);
    for g in crcs.chunks_exact(GROUP).take(groups) {
        let x = g
            .iter()
            .fold(0, |x, c| one.apply(x) ^ c.load(Ordering::Relaxed));
        crc = group.apply(crc) ^ x;
    }
    for (j, c) in crcs.iter().enumerate().skip(groups * GROUP) {
        let c = c.load(Ordering::Relaxed);
        let n = (len - j * CHUNK).min(CHUNK);
        crc = if n == CHUNK {
            one.apply(crc) ^ c
        } else {
            shift(crc, n) ^ c
        };
    }
    crc
}

/// Chunks folded alone before they join the whole.
const GROUP: usize = 8;

/// `crc32c_combine(a, b, CHUNK) == apply(a) ^ b`: appending `CHUNK` bytes to a
/// stream is a linear map on its CRC (zlib's combine is exactly that map, then the
/// XOR), here as four byte tables.
struct Shift([[u32; 256]; 4]);

impl Shift {
    fn new(len: usize) -> Shift {
        let col: [u32; 32] = std::array::from_fn(|i| crc32c::crc32c_combine(1 << i, 0, len));
        let mut t = [[0u32; 256]; 4];
        for (b, table) in t.iter_mut().enumerate() {
            for (v, e) in table.iter_mut().enumerate() {
                *e = (0..8)
                    .filter(|bit| v >> bit & 1 == 1)
                    .fold(0, |acc, bit| acc ^ col[8 * b + bit]);
            }
        }
        Shift(t)
    }

    fn apply(&self, x: u32) -> u32 {
        let t = &self.0;
        t[0][(x & 0xff) as usize]
            ^ t[1][(x >> 8 & 0xff) as usize]
            ^ t[2][(x >> 16 & 0xff) as usize]
            ^ t[3][(x >> 24) as usize]
    }
}

/// The shifts over one chunk and over a group of chunks.
fn shifts() -> &'static (Shift, Shift) {
    static SHIFTS: OnceLock<(Shift, Shift)> = OnceLock::new();
    SHIFTS.get_or_init(|| (Shift::new(CHUNK), Shift::new(GROUP * CHUNK)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_shift_is_crc32c_combine_with_nothing_appended() {
        for (a, len) in [
            (0u32, 1usize),
            (0xFFFF_FFFF, 64),
            (0x1234_5678, 4 << 20),
            (7, 12345),
        ] {
            assert_eq!(
                shift(a, len),
                crc32c::crc32c_combine(a, 0, len),
                "{a:#x} past {len}"
            );
        }
    }

    /// The device CRC kernel's arithmetic, on the CPU: each segment's raw CRC,
    /// shifted past the bytes after it (as the kernel does, with the same powers),
    /// XORed together, then continued from a header's CRC as serialize does.
    #[test]
    fn the_device_crc_scheme_gives_crc32c() {
        use super::super::device::crc_segment;
        let raw = |bytes: &[u8]| {
            bytes.iter().fold(0u32, |mut c, &b| {
                c ^= b as u32;
                for _ in 0..8 {
                    c = (c >> 1) ^ if c & 1 == 1 { 0x82F6_3B78 } else { 0 };
                }
                c
            })
        };
        let head = crc32c::crc32c(b"sluice checkpoint header");
        for len in [1usize, 15, 64, 1000, 4096, 64 * 1000 + 48, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8 ^ 0x5a).collect();
            let seg = crc_segment(len);
            assert_eq!(seg % 16, 0);
            let mut total = 0u32;
            for start in (0..len).step_by(seg) {
                let end = (start + seg).min(len);
                // The kernel's shift: one power of x per set bit of the distance.
                total ^= shift(raw(&data[start..end]), len - end);
            }
            assert_eq!(
                append_raw(head, total, len),
                crc32c::crc32c_append(head, &data),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn the_shifts_are_crc32c_combine() {
        let (one, group) = shifts();
        for (a, b) in [
            (0u32, 0u32),
            (1, 2),
            (0xdead_beef, 0x1234_5678),
            (u32::MAX, 7),
        ] {
            assert_eq!(one.apply(a) ^ b, crc32c::crc32c_combine(a, b, CHUNK));
            let n = GROUP * CHUNK;
            assert_eq!(group.apply(a) ^ b, crc32c::crc32c_combine(a, b, n));
        }
    }

    #[test]
    fn folding_chunks_gives_the_crc_of_the_whole() {
        let head = crc32c::crc32c(b"head");
        for len in [
            3 * CHUNK + 77,
            GROUP * CHUNK,
            2 * GROUP * CHUNK + 3 * CHUNK + 77,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let crcs: Vec<AtomicU32> = data
                .chunks(CHUNK)
                .map(|c| AtomicU32::new(crc32c::crc32c(c)))
                .collect();
            assert_eq!(
                fold(head, &crcs, len),
                crc32c::crc32c_append(head, &data),
                "{len} bytes"
            );
        }
    }
}

//! The RNG checkpoint's byte format, version 1 (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `SLRNGCK\0` |
//! | 4 | format version (1) |
//! | 4 | algorithm (1: Philox4x32-10 in cuRAND's state layout) |
//! | 8 | number of states |
//! | 8 | seed |
//! | 64 per state | the states (`PhiloxState`, field by field) |
//! | 4 | CRC32C of everything before it |
//!
//! Reading checks every field and the CRC: a flipped bit, a truncation, another
//! version or another algorithm gives `SLUICE_ERROR_CORRUPT_DATA`, never a state.

use super::philox::PhiloxState;
use crate::error::{Error, ErrorCode, Result};

const MAGIC: &[u8; 8] = b"SLRNGCK\0";
/// The format version this library writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Philox4x32-10, one cuRAND `curandStatePhilox4_32_10_t` per sample.
pub(crate) const ALGORITHM_PHILOX4X32_10: u32 = 1;
const HEADER: usize = 8 + 4 + 4 + 8 + 8;
const STATE: usize = std::mem::size_of::<PhiloxState>();

/// The states of a generator at one point, and the seed it was created with.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub seed: u64,
    pub states: Vec<PhiloxState>,
}

/// The serialized size of a checkpoint of `n_states` states.
pub fn serialized_len(n_states: usize) -> Option<usize> {
    n_states.checked_mul(STATE)?.checked_add(HEADER + 4)
}

fn corrupt(what: impl Into<String>) -> Error {
    Error::new(ErrorCode::CorruptData, what)
}

impl Checkpoint {
    /// Writes the checkpoint into `out`, which must be `serialized_len` bytes.
    pub fn serialize_into(&self, out: &mut [u8]) -> Result<()> {
        let len = serialized_len(self.states.len())
            .ok_or_else(|| Error::out_of_range("checkpoint size overflows"))?;
        if out.len() != len {
            return Err(Error::out_of_range(format!(
                "a checkpoint of {} states takes {len} bytes, not {}",
                self.states.len(),
                out.len()
            )));
        }
        let mut w = Writer { out, at: 0 };
        w.bytes(MAGIC);
        w.u32(FORMAT_VERSION);
        w.u32(ALGORITHM_PHILOX4X32_10);
        w.u64(self.states.len() as u64);
        w.u64(self.seed);
        for s in &self.states {
            s.ctr
                .iter()
                .chain(&s.output)
                .chain(&s.key)
                .for_each(|&v| w.u32(v));
            w.u32(s.state);
            w.u32(s.boxmuller_flag as u32);
            w.u32(s.boxmuller_flag_double as u32);
            w.u32(s.boxmuller_extra.to_bits());
            w.u64(s.boxmuller_extra_double.to_bits());
        }
        let crc = crc32c::crc32c(&w.out[..w.at]);
        w.u32(crc);
        debug_assert_eq!(w.at, len);
        Ok(())
    }

    /// The checkpoint as a new byte string.
    pub fn serialize(&self) -> Result<Vec<u8>> {
        let len = serialized_len(self.states.len())
            .ok_or_else(|| Error::out_of_range("checkpoint size overflows"))?;
        let mut out = vec![0u8; len];
        self.serialize_into(&mut out)?;
        Ok(out)
    }

    /// Reads a checkpoint, checking its magic, version, algorithm, size and CRC.
    pub fn deserialize(bytes: &[u8]) -> Result<Checkpoint> {
        let (seed, payload) = parse(bytes)?;
        let states = payload
            .chunks_exact(STATE)
            .map(|c| {
                let mut r = Reader { bytes: c, at: 0 };
                let mut words = [0u32; 10];
                words.iter_mut().for_each(|w| *w = r.u32());
                PhiloxState {
                    ctr: [words[0], words[1], words[2], words[3]],
                    output: [words[4], words[5], words[6], words[7]],
                    key: [words[8], words[9]],
                    state: r.u32(),
                    boxmuller_flag: r.u32() as i32,
                    boxmuller_flag_double: r.u32() as i32,
                    boxmuller_extra: f32::from_bits(r.u32()),
                    boxmuller_extra_double: f64::from_bits(r.u64()),
                }
            })
            .collect();
        Ok(Checkpoint { seed, states })
    }
}

/// The header of a checkpoint of `n_states` states (the bytes before the states).
pub(crate) fn header(n_states: usize, seed: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    let mut w = Writer { out: &mut h, at: 0 };
    w.bytes(MAGIC);
    w.u32(FORMAT_VERSION);
    w.u32(ALGORITHM_PHILOX4X32_10);
    w.u64(n_states as u64);
    w.u64(seed);
    h
}

/// The offset of the states in a serialized checkpoint.
pub(crate) const PAYLOAD_OFFSET: usize = HEADER;

/// Checks a serialized checkpoint (magic, size, CRC, version, algorithm) and
/// returns its seed and its states' bytes, which are
/// `PhiloxState`s as they lie in memory (little-endian, no padding).
pub(crate) fn parse(bytes: &[u8]) -> Result<(u64, &[u8])> {
    if bytes.len() < HEADER + 4 {
        return Err(corrupt(format!(
            "an RNG checkpoint has at least {} bytes, not {}",
            HEADER + 4,
            bytes.len()
        )));
    }
    if &bytes[..8] != MAGIC {
        return Err(corrupt("not an RNG checkpoint (bad magic)"));
    }
    let mut r = Reader { bytes, at: 8 };
    let version = r.u32();
    let algorithm = r.u32();
    let n = r.u64();
    let seed = r.u64();
    let want = usize::try_from(n)
        .ok()
        .and_then(serialized_len)
        .ok_or_else(|| corrupt(format!("RNG checkpoint: {n} states is too many")))?;
    if bytes.len() != want {
        return Err(corrupt(format!(
            "RNG checkpoint of {n} states has {} bytes, expected {want} (truncated or padded)",
            bytes.len()
        )));
    }
    let body = &bytes[..want - 4];
    let stored = u32::from_le_bytes(bytes[want - 4..].try_into().expect("4 bytes"));
    if crc32c::crc32c(body) != stored {
        return Err(corrupt(
            "RNG checkpoint: CRC32C mismatch (the bytes were changed)",
        ));
    }
    if version != FORMAT_VERSION {
        return Err(corrupt(format!(
            "RNG checkpoint format version {version}; this library reads version {FORMAT_VERSION}"
        )));
    }
    if algorithm != ALGORITHM_PHILOX4X32_10 {
        return Err(corrupt(format!(
            "RNG checkpoint of algorithm {algorithm}; this library knows Philox4x32-10 ({ALGORITHM_PHILOX4X32_10})"
        )));
    }
    // A state's position is not checked: serialize writes any state it is given
    // (a user kernel may have left one past 3), and both backends draw from such
    // a state as cuRAND does. The CRC vouches for the bytes.
    Ok((seed, &body[HEADER..]))
}

struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.out[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let v = self.bytes[self.at..self.at + N]
            .try_into()
            .expect("length checked");
        self.at += N;
        v
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

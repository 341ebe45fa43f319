//! The checkpointable on-device RNG (issue 13): per-sample Philox4x32-10 states in
//! device memory, exactly cuRAND's `curandStatePhilox4_32_10_t`; generation as a
//! tracked op on an explicit stream; saves and restores as stream-ordered copies;
//! checkpoints serialized into a versioned, checksummed byte string (`download/`:
//! one bulk copy with the device's checksum, or piecewise copies overlapped with
//! the host's).

pub mod checkpoint;
mod crc;
mod device;
mod download;
pub mod philox;

use crate::c_enum::c_enum;
use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use crate::memory::{Buffer, BufferKind};
use crate::ops;
use crate::stream::Stream;
use crate::sync::access_set;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Bytes per state.
pub const STATE_BYTES: usize = std::mem::size_of::<philox::PhiloxState>();

/// Where a state's key, the seed it was made with, lies in its bytes.
const KEY_OFFSET: usize = std::mem::offset_of!(philox::PhiloxState, key);

c_enum! {
    /// What `sluice_rng_generate` draws, seen by C as `SLUICE_RNG_*`.
    pub enum Distribution: "SLUICE_RNG_" {
        /// RNG distribution: raw 32-bit outputs, `curand`.
        U32 = 1 => U32,
        /// RNG distribution: floats in (0, 1], `curand_uniform`.
        Uniform = 2 => UNIFORM,
        /// RNG distribution: standard normal floats, `curand_normal` (drawn in pairs).
        Normal = 3 => NORMAL,
    }
}

c_enum! {
    /// Where draw `j` of state `i` goes among `count` draws of `n` states, seen by C
    /// as `SLUICE_RNG_LAYOUT_*`.
    pub enum Layout: "SLUICE_RNG_LAYOUT_" {
        /// RNG layout: `out[j * n + i]`, each draw of every state together (coalesced).
        SampleMajor = 1 => SAMPLE_MAJOR,
        /// RNG layout: `out[i * count + j]`, each state's draws together.
        StateMajor = 2 => STATE_MAJOR,
    }
}

/// A generator: `n` states in a device buffer, state `i` starting as
/// `curand_init(seed, i, 0)`.
pub struct Rng {
    states: Arc<Buffer>,
    n: usize,
    seed: AtomicU64,
}

/// A copy of a generator's states at one point of a stream, on the device.
pub struct RngCheckpoint {
    states: Arc<Buffer>,
    n: usize,
    seed: AtomicU64,
}

fn state_bytes(n: usize) -> Result<usize> {
    if n == 0 {
        return Err(Error::invalid_argument("an RNG needs at least one state"));
    }
    n.checked_mul(STATE_BYTES)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::out_of_range(format!("{n} RNG states do not fit in memory")))
}

impl Rng {
    /// Makes `n` states on the device of `stream`, initialised on `stream`.
    pub fn create(stream: &Arc<Stream>, seed: u64, n: usize) -> Result<Arc<Rng>> {
        let bytes = state_bytes(n)?;
        let states = Buffer::alloc(stream, bytes)?;
        let w = [states.sync.clone()];
        device::init(stream, states.addr, n, seed, &access_set(&[], &w))?;
        Ok(Arc::new(Rng {
            states,
            n,
            seed: AtomicU64::new(seed),
        }))
    }

    /// The number of states.
    pub fn n_states(&self) -> usize {
        self.n
    }

    /// The seed of the states' creation, or of the checkpoint last restored.
    pub fn seed(&self) -> u64 {
        self.seed.load(Ordering::Relaxed)
    }

    /// The states' buffer, for user kernels (`include/sluice/rng.cuh`): declare its
    /// sync object as written by any kernel that draws.
    pub fn states(&self) -> &Arc<Buffer> {
        &self.states
    }

    /// Draws `count` values of `dist` from every state into `out` at `offset`
    /// (`n * count` 32-bit words in `layout`), as one op on `stream` that writes
    /// both the states and `out`.
    pub fn generate(
        &self,
        stream: &Stream,
        dist: Distribution,
        out: &Buffer,
        offset: usize,
        count: usize,
        layout: Layout,
    ) -> Result<()> {
        stream
            .device
            .same_device_with(&self.states.device, || "the RNG".into())?;
        stream
            .device
            .same_device_with(&out.device, || format!("{out:?}"))?;
        if !matches!(out.kind, BufferKind::Device | BufferKind::Foreign) {
            return Err(Error::invalid_argument(format!(
                "RNG output must be a device buffer (its own or foreign), not {out:?}"
            )));
        }
        let words = self
            .n
            .checked_mul(count)
            .filter(|w| *w <= isize::MAX as usize / 4)
            .ok_or_else(|| {
                Error::out_of_range(format!("{} states x {count} draws overflows", self.n))
            })?;
        let addr = out.range(offset, words * 4, "RNG output")?;
        let states_end = self.states.addr + self.states.size as u64;
        if addr < states_end && self.states.addr < addr + (words * 4) as u64 {
            return Err(Error::invalid_argument(format!(
                "RNG output [{addr:#x}, +{}) overlaps the generator's own states",
                words * 4
            )));
        }
        if addr % 4 != 0 {
            return Err(Error::invalid_argument(format!(
                "RNG output offset {offset} is not a multiple of 4"
            )));
        }
        if count == 0 {
            return Ok(());
        }
        let w = [self.states.sync.clone(), out.sync.clone()];
        let set = access_set(&[], &w);
        device::generate(
            stream,
            self.states.addr,
            self.n,
            dist,
            addr,
            count,
            layout,
            &set,
        )
    }

    /// Copies the states into `ckpt`, in order on `stream` (a device copy; no host
    /// sync). Allowed during capture: each replay refreshes the checkpoint.
    pub fn save(&self, stream: &Stream, ckpt: &RngCheckpoint) -> Result<()> {
        self.check_pair(ckpt)?;
        ops::copy(
            stream,
            &ckpt.states,
            0,
            &self.states,
            0,
            self.n * STATE_BYTES,
        )?;
        ckpt.seed.store(self.seed(), Ordering::Relaxed);
        crate::trace::rng_event("rng save", stream, self.n);
        Ok(())
    }

    /// Copies `ckpt`'s states into the generator, in order on `stream`.
    pub fn restore(&self, stream: &Stream, ckpt: &RngCheckpoint) -> Result<()> {
        self.check_pair(ckpt)?;
        ops::copy(
            stream,
            &self.states,
            0,
            &ckpt.states,
            0,
            self.n * STATE_BYTES,
        )?;
        self.seed.store(ckpt.seed(), Ordering::Relaxed);
        crate::trace::rng_event("rng restore", stream, self.n);
        Ok(())
    }

    fn check_pair(&self, ckpt: &RngCheckpoint) -> Result<()> {
        if ckpt.n != self.n {
            return Err(Error::invalid_argument(format!(
                "the checkpoint holds {} states, the RNG {}",
                ckpt.n, self.n
            )));
        }
        Ok(())
    }
}

/// The device's own stream for checkpoint uploads and downloads, so that a
/// serialize waits for its save and nothing else.
fn io_stream(device: &Arc<Device>) -> Result<Arc<Stream>> {
    internal_stream(device, "sluice rng io")
}

/// The library's own stream named `label` on `device`, made on first use.
pub(super) fn internal_stream(device: &Arc<Device>, label: &'static str) -> Result<Arc<Stream>> {
    type PerDevice = std::sync::Mutex<Vec<((u32, u32, &'static str), Arc<Stream>)>>;
    static STREAMS: OnceLock<PerDevice> = OnceLock::new();
    let key = (device.kind() as u32, device.ordinal(), label);
    let mut v = STREAMS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some((_, s)) = v.iter().find(|(k, _)| *k == key) {
        return Ok(s.clone());
    }
    let s = Stream::create(device, 1, 0)?;
    s.set_label(Some(label));
    v.push((key, s.clone()));
    Ok(s)
}

impl RngCheckpoint {
    /// A checkpoint of `rng`'s states, allocated on `stream` and holding the
    /// states as of this point on it (a first save), so that it never holds
    /// uninitialised memory.
    pub fn create(stream: &Arc<Stream>, rng: &Rng) -> Result<Arc<RngCheckpoint>> {
        let states = Buffer::alloc(stream, rng.n * STATE_BYTES)?;
        let ckpt = Arc::new(RngCheckpoint {
            states,
            n: rng.n,
            seed: AtomicU64::new(rng.seed()),
        });
        rng.save(stream, &ckpt)?;
        Ok(ckpt)
    }

    /// The number of states.
    pub fn n_states(&self) -> usize {
        self.n
    }

    /// The seed of the generator saved last.
    pub fn seed(&self) -> u64 {
        self.seed.load(Ordering::Relaxed)
    }

    /// The size of the serialized checkpoint.
    pub fn serialized_len(&self) -> usize {
        checkpoint::serialized_len(self.n).expect("checked at creation")
    }

    /// Writes the checkpoint as a versioned byte string into `out` (exactly
    /// `serialized_len` bytes). The copies wait for the last save into this
    /// checkpoint and nothing later. Where `out` is page-locked (pinned or
    /// registered) and the device is CUDA, the states come in one bulk copy and
    /// the CRC32C from a kernel beside it; otherwise in pieces (through pinned
    /// slots cached per device where `out` is pageable), checksummed on host
    /// threads while later pieces are on the wire (`download/`).
    pub fn serialize_into(&self, out: &mut [u8]) -> Result<()> {
        let len = self.serialized_len();
        if out.len() != len {
            return Err(Error::out_of_range(format!(
                "a checkpoint of {} states serializes to {len} bytes, not {}",
                self.n,
                out.len()
            )));
        }
        let io = io_stream(&self.states.device)?;
        let (head, rest) = out.split_at_mut(checkpoint::PAYLOAD_OFFSET);
        head.copy_from_slice(&checkpoint::header(self.n, self.seed()));
        let (body, tail) = rest.split_at_mut(self.n * STATE_BYTES);
        let mut crc =
            download::download_with_crc(&self.states, &io, body, crc32c::crc32c(head), tail)?;
        // The seed is the states' key: a save replayed in a graph, or an eager one
        // after it, may have left other states than the last save call's.
        let key = &body[KEY_OFFSET..KEY_OFFSET + 8];
        let seed = u64::from_le_bytes(key.try_into().expect("8 bytes"));
        if seed != self.seed() {
            let fixed = checkpoint::header(self.n, seed);
            crc = crc::replace_prefix(crc, head, &fixed, body.len());
            head.copy_from_slice(&fixed);
            self.seed.store(seed, Ordering::Relaxed);
        }
        tail.copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Reads a serialized checkpoint onto `device`. Every field is checked; a bad
    /// byte gives `CorruptData`, never a state.
    pub fn deserialize(device: &Arc<Device>, bytes: &[u8]) -> Result<Arc<RngCheckpoint>> {
        let (seed, payload) = checkpoint::parse(bytes)?;
        let n = payload.len() / STATE_BYTES;
        if n == 0 {
            return Err(Error::new(
                ErrorCode::CorruptData,
                "RNG checkpoint of 0 states",
            ));
        }
        let io = io_stream(device)?;
        let states = Buffer::alloc(&io, payload.len())?;
        ops::copy_from_host(&io, &states, 0, payload)?;
        Ok(Arc::new(RngCheckpoint {
            states,
            n,
            seed: AtomicU64::new(seed),
        }))
    }
}

//! The opt-in on-disk cache of compiled kernel images (`SLUICE_KERNEL_CACHE=dir`).
//!
//! - An entry's key is a 128-bit FNV-1a hash of everything that decides the image:
//!   the source, the program name, the options, the target, the compiler and its
//!   version, the driver version and the built-in headers ([`Key`]).
//! - An entry is one file, `<key in hex>.sluicebin`: a header (magic, format version,
//!   the key again, the image's length and CRC-32C, and the header's own CRC-32C),
//!   then the image. An entry that fails any check (truncated, corrupt, another key)
//!   is ignored and rewritten, never loaded.
//! - Writes go to a temporary file in the same directory, renamed over the entry, so
//!   a reader never sees half a file; concurrent writers of one key each write a
//!   whole entry and the last rename wins.
//! - The cache is best effort: a directory that cannot be read or written costs a
//!   compile and a warning in the log, never an error.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const MAGIC: &[u8; 8] = b"SLUICEKC";
const FORMAT: u32 = 1;
/// Magic, format, reserved, key, image length, image CRC, header CRC.
const HEADER_LEN: usize = 8 + 4 + 4 + 16 + 8 + 4 + 4;
const SUFFIX: &str = "sluicebin";

/// What the cache did for one compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// No cache directory was set.
    Off,
    /// Not cached: the options name files (`-I`, `--include-path`, `--pre-include`)
    /// whose contents the key cannot see.
    Bypassed,
    /// The image came from the cache.
    Hit,
    /// No entry: compiled and stored.
    Miss,
    /// An entry failed its checks: ignored, compiled again and rewritten.
    Rejected,
}

/// Process-wide counts of what the cache did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub rejected: u64,
}

static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static REJECTED: AtomicU64 = AtomicU64::new(0);

/// The process-wide counts of hits, misses and rejected entries.
pub fn stats() -> CacheStats {
    CacheStats {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        rejected: REJECTED.load(Ordering::Relaxed),
    }
}

pub(crate) fn count(outcome: CacheOutcome) {
    let c = match outcome {
        CacheOutcome::Hit => &HITS,
        CacheOutcome::Miss => &MISSES,
        CacheOutcome::Rejected => &REJECTED,
        CacheOutcome::Off | CacheOutcome::Bypassed => return,
    };
    c.fetch_add(1, Ordering::Relaxed);
}

/// The directory named by `SLUICE_KERNEL_CACHE`, if set and not empty.
pub fn dir_from_env() -> Option<PathBuf> {
    std::env::var_os("SLUICE_KERNEL_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// A cache key: 128-bit FNV-1a over length-prefixed parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(pub [u8; 16]);

/// Builds a [`Key`] from its parts, each length-prefixed so that no two different
/// lists of parts hash the same bytes.
pub struct KeyBuilder(u128);

const FNV_OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
const FNV_PRIME: u128 = 0x0000000001000000000000000000013b;

impl Default for KeyBuilder {
    fn default() -> Self {
        let mut k = KeyBuilder(FNV_OFFSET);
        k.part(b"sluice kernel cache");
        k.part(&FORMAT.to_le_bytes());
        k
    }
}

impl KeyBuilder {
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u128::from(x);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// Adds one part.
    pub fn part(&mut self, b: &[u8]) -> &mut Self {
        self.bytes(&(b.len() as u64).to_le_bytes());
        self.bytes(b);
        self
    }

    pub fn finish(&self) -> Key {
        Key(self.0.to_le_bytes())
    }
}

impl Key {
    fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The entry's file in `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}.{SUFFIX}", self.hex()))
    }
}

/// An entry as it is stored: the header, then the image.
pub fn encode(key: &Key, image: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + image.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&(image.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(image).to_le_bytes());
    let hcrc = crc32c::crc32c(&out);
    out.extend_from_slice(&hcrc.to_le_bytes());
    out.extend_from_slice(image);
    out
}

/// The image of a stored entry, or why the entry is refused.
pub fn decode(key: &Key, bytes: &[u8]) -> Result<Vec<u8>, &'static str> {
    let le32 =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if bytes.len() < HEADER_LEN {
        return Err("shorter than its header");
    }
    if &bytes[..8] != MAGIC {
        return Err("bad magic");
    }
    if crc32c::crc32c(&bytes[..HEADER_LEN - 4]) != le32(HEADER_LEN - 4) {
        return Err("header checksum mismatch");
    }
    if le32(8) != FORMAT {
        return Err("another format version");
    }
    if bytes[16..32] != key.0 {
        return Err("another key");
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[32..40]);
    let image = &bytes[HEADER_LEN..];
    if u64::from_le_bytes(len) != image.len() as u64 {
        return Err("truncated or padded");
    }
    if image.is_empty() {
        return Err("empty image");
    }
    if crc32c::crc32c(image) != le32(40) {
        return Err("image checksum mismatch");
    }
    Ok(image.to_vec())
}

/// Looks `key` up in `dir`: `Ok(Some(image))` on a hit, `Ok(None)` when there is no
/// entry, `Err(why)` when there is one that fails its checks.
pub fn load(dir: &Path, key: &Key) -> Result<Option<Vec<u8>>, String> {
    let path = key.path(dir);
    match std::fs::read(&path) {
        Ok(bytes) => decode(key, &bytes)
            .map(Some)
            .map_err(|why| format!("{}: {why}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Stores `image` under `key` in `dir` (created if missing): a temporary file, then
/// a rename over the entry.
pub fn store(dir: &Path, key: &Key, image: &[u8]) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        key.hex(),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&encode(key, image))?;
        f.sync_all()?;
        std::fs::rename(&tmp, key.path(dir))
    };
    let r = write();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parts: &[&[u8]]) -> Key {
        let mut b = KeyBuilder::default();
        for p in parts {
            b.part(p);
        }
        b.finish()
    }

    #[test]
    fn keys_separate_their_parts() {
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_ne!(key(&[b"a"]), key(&[b"a", b""]));
        assert_eq!(key(&[b"x", b"y"]), key(&[b"x", b"y"]));
        assert_eq!(key(&[]).hex().len(), 32);
    }

    #[test]
    fn every_bit_flip_and_truncation_is_refused() {
        let k = key(&[b"k"]);
        let image = b"\x7fELF some image bytes".to_vec();
        let e = encode(&k, &image);
        assert_eq!(decode(&k, &e).as_deref(), Ok(&image[..]));
        for i in 0..e.len() {
            for bit in 0..8 {
                let mut c = e.clone();
                c[i] ^= 1 << bit;
                assert!(decode(&k, &c).is_err(), "byte {i} bit {bit}");
            }
        }
        for len in 0..e.len() {
            assert!(decode(&k, &e[..len]).is_err(), "truncated to {len}");
        }
        let mut longer = e.clone();
        longer.push(0);
        assert!(decode(&k, &longer).is_err());
        assert_eq!(decode(&key(&[b"other"]), &e), Err("another key"));
    }

    #[test]
    fn store_then_load() {
        let dir = std::env::temp_dir().join(format!("sluice-kc-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let k = key(&[b"store"]);
        assert_eq!(load(&dir, &k), Ok(None));
        store(&dir, &k, b"image").expect("store");
        assert_eq!(load(&dir, &k), Ok(Some(b"image".to_vec())));
        std::fs::write(k.path(&dir), b"SLUICEKC junk").expect("write");
        assert!(load(&dir, &k).is_err());
        store(&dir, &k, b"image 2").expect("store");
        assert_eq!(load(&dir, &k), Ok(Some(b"image 2".to_vec())));
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Generational handle tables: `u64` handles that name an `Arc<T>`.
//!
//! Bits: `[tag:8][generation:24][index:32]`. The tag names the table (so a stream
//! handle passed as an event is rejected), the generation rejects stale handles, and
//! 0 is never valid. Tables are sharded; a lookup takes one shard's read lock.

use std::sync::{Arc, RwLock};

const SHARDS: usize = 32;
const GEN_MASK: u64 = 0xff_ffff;

struct Slot<T> {
    generation: u32,
    value: Option<Arc<T>>,
}

struct Shard<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
}

pub struct HandleTable<T> {
    tag: u8,
    shards: Vec<RwLock<Shard<T>>>,
    next_shard: std::sync::atomic::AtomicUsize,
}

/// Why a handle did not resolve.
#[derive(Debug, PartialEq, Eq)]
pub enum Stale {
    Null,
    WrongType,
    Dead,
}

impl<T> HandleTable<T> {
    pub fn new(tag: u8) -> Self {
        HandleTable {
            tag,
            shards: (0..SHARDS)
                .map(|_| {
                    RwLock::new(Shard {
                        slots: Vec::new(),
                        free: Vec::new(),
                    })
                })
                .collect(),
            next_shard: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn split(&self, bits: u64) -> Result<(usize, usize, u32), Stale> {
        if bits == 0 {
            return Err(Stale::Null);
        }
        if (bits >> 56) as u8 != self.tag {
            return Err(Stale::WrongType);
        }
        let generation = ((bits >> 32) & GEN_MASK) as u32;
        let index = (bits & 0xffff_ffff) as usize;
        Ok((index % SHARDS, index / SHARDS, generation))
    }

    pub fn insert(&self, value: Arc<T>) -> u64 {
        let s = self
            .next_shard
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            % SHARDS;
        let mut shard = self.shards[s].write().unwrap_or_else(|p| p.into_inner());
        let local = match shard.free.pop() {
            Some(i) => {
                shard.slots[i as usize].value = Some(value);
                i as usize
            }
            None => {
                shard.slots.push(Slot {
                    generation: 1,
                    value: Some(value),
                });
                shard.slots.len() - 1
            }
        };
        let generation = shard.slots[local].generation as u64;
        let index = (local * SHARDS + s) as u64;
        ((self.tag as u64) << 56) | (generation << 32) | index
    }

    pub fn get(&self, bits: u64) -> Result<Arc<T>, Stale> {
        let (s, local, generation) = self.split(bits)?;
        let shard = self.shards[s].read().unwrap_or_else(|p| p.into_inner());
        match shard.slots.get(local) {
            Some(slot) if slot.generation == generation => slot.value.clone().ok_or(Stale::Dead),
            _ => Err(Stale::Dead),
        }
    }

    /// Runs `f` on the object without cloning its `Arc`, under the shard's read lock.
    /// For short, non-blocking calls only; `f` must not touch this table.
    pub fn with<R>(&self, bits: u64, f: impl FnOnce(&Arc<T>) -> R) -> Result<R, Stale> {
        let (s, local, generation) = self.split(bits)?;
        let shard = self.shards[s].read().unwrap_or_else(|p| p.into_inner());
        match shard.slots.get(local) {
            Some(Slot {
                generation: g,
                value: Some(v),
            }) if *g == generation => Ok(f(v)),
            _ => Err(Stale::Dead),
        }
    }

    /// Removes the entry; the object lives on while other `Arc`s hold it.
    pub fn remove(&self, bits: u64) -> Result<Arc<T>, Stale> {
        let (s, local, generation) = self.split(bits)?;
        let mut shard = self.shards[s].write().unwrap_or_else(|p| p.into_inner());
        let slot = match shard.slots.get_mut(local) {
            Some(slot) if slot.generation == generation && slot.value.is_some() => slot,
            _ => return Err(Stale::Dead),
        };
        let v = slot.value.take().ok_or(Stale::Dead)?;
        // Generation 0 is skipped so that no live handle has a zero generation.
        slot.generation = ((slot.generation as u64 + 1) & GEN_MASK).max(1) as u32;
        shard.free.push(local as u32);
        Ok(v)
    }

    /// Number of live entries (for leak tests).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.read().unwrap_or_else(|p| p.into_inner());
                s.slots.len() - s.free.len()
            })
            .sum()
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_wrong_type_and_null_are_rejected() {
        let t = HandleTable::new(3);
        let h = t.insert(Arc::new(7));
        assert_eq!(*t.get(h).unwrap(), 7);
        assert_eq!(t.get(0).unwrap_err(), Stale::Null);
        assert_eq!(t.get(h ^ (1 << 56)).unwrap_err(), Stale::WrongType);
        t.remove(h).unwrap();
        assert!(t.is_empty());
        assert_eq!(t.get(h).unwrap_err(), Stale::Dead);
        assert_eq!(t.remove(h).unwrap_err(), Stale::Dead);
        let h2 = t.insert(Arc::new(8));
        assert_ne!(h, h2, "a reused slot gets a new generation");
        assert_eq!(t.get(h).unwrap_err(), Stale::Dead);
        assert_eq!(*t.get(h2).unwrap(), 8);
    }

    #[test]
    fn forged_index_is_rejected() {
        let t: HandleTable<i32> = HandleTable::new(9);
        let forged = (9u64 << 56) | (1 << 32) | 123_456;
        assert_eq!(t.get(forged).unwrap_err(), Stale::Dead);
    }
}

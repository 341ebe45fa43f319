//! The RNG's host side (issue 13): Philox4x32-10 against Random123's known answers,
//! cuRAND's per-state stream semantics, and the checkpoint format's checks.

use sluice::rng::checkpoint::{serialized_len, Checkpoint};
use sluice::rng::philox::{philox4x32_10, uniform, PhiloxState};
use sluice::ErrorCode;

#[test]
fn philox4x32_10_matches_random123_known_answers() {
    let kat = [
        (
            [0u32; 4],
            [0u32; 2],
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
        ),
        (
            [u32::MAX; 4],
            [u32::MAX; 2],
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
        ),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
        ),
    ];
    for (ctr, key, want) in kat {
        assert_eq!(philox4x32_10(ctr, key), want, "ctr {ctr:x?} key {key:x?}");
    }
}

#[test]
fn state_i_draws_the_blocks_of_subsequence_i() {
    let seed = 0x0123_4567_89ab_cdef_u64;
    let key = [seed as u32, (seed >> 32) as u32];
    for i in [0u64, 1, 7, 1 << 32, u64::MAX] {
        let mut s = PhiloxState::new(seed, i, 0);
        for block in 0..3u32 {
            let want = philox4x32_10([block, 0, i as u32, (i >> 32) as u32], key);
            let got = [s.next_u32(), s.next_u32(), s.next_u32(), s.next_u32()];
            assert_eq!(got, want, "state {i} block {block}");
        }
    }
}

#[test]
fn an_offset_skips_that_many_outputs() {
    let mut base = PhiloxState::new(42, 3, 0);
    let all: Vec<u32> = (0..40).map(|_| base.next_u32()).collect();
    for off in 0..30u64 {
        let mut s = PhiloxState::new(42, 3, off);
        let got: Vec<u32> = (0..10).map(|_| s.next_u32()).collect();
        assert_eq!(got, all[off as usize..off as usize + 10], "offset {off}");
        let mut t = PhiloxState::new(42, 3, 0);
        t.skip(off);
        assert_eq!(t, PhiloxState::new(42, 3, off), "skip({off})");
    }
}

#[test]
fn the_counter_carries_across_words() {
    // The low counter word wraps: the next block uses ctr[1] + 1.
    let mut s = PhiloxState::new(9, 0, 0);
    s.skip(4 * u32::MAX as u64);
    assert_eq!(s.ctr, [u32::MAX, 0, 0, 0]);
    for _ in 0..4 {
        s.next_u32();
    }
    assert_eq!(s.ctr, [0, 1, 0, 0]);
    assert_eq!(s.output, philox4x32_10([0, 1, 0, 0], [9, 0]));
}

#[test]
fn uniform_is_in_the_half_open_unit_interval() {
    assert!(uniform(0) > 0.0);
    assert_eq!(uniform(u32::MAX), 1.0);
    assert_eq!(uniform(0), 2.328_306_4e-10 / 2.0);
    let mut s = PhiloxState::new(5, 0, 0);
    let mut t = s;
    assert_eq!(s.next_uniform(), uniform(t.next_u32()));
}

fn sample(n: usize) -> Checkpoint {
    let states = (0..n as u64)
        .map(|i| {
            let mut s = PhiloxState::new(77, i, i * 3);
            s.boxmuller_flag = (i % 2) as i32;
            s.boxmuller_extra = i as f32 * 0.5;
            s.boxmuller_extra_double = -(i as f64);
            s
        })
        .collect();
    Checkpoint { seed: 77, states }
}

#[test]
fn a_checkpoint_round_trips() {
    for n in [0, 1, 5] {
        let c = sample(n);
        let bytes = c.serialize().unwrap();
        assert_eq!(bytes.len(), serialized_len(n).unwrap());
        assert_eq!(Checkpoint::deserialize(&bytes).unwrap(), c);
    }
    // Restored states continue the same stream.
    let mut c = sample(2);
    let mut back = Checkpoint::deserialize(&c.serialize().unwrap()).unwrap();
    for _ in 0..9 {
        assert_eq!(c.states[1].next_u32(), back.states[1].next_u32());
    }
}

#[test]
fn every_bit_flip_and_every_truncation_is_detected() {
    let bytes = sample(3).serialize().unwrap();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            let e = Checkpoint::deserialize(&b).unwrap_err();
            assert_eq!(e.code, ErrorCode::CorruptData, "byte {i} bit {bit}: {e:?}");
        }
    }
    for len in 0..bytes.len() {
        let e = Checkpoint::deserialize(&bytes[..len]).unwrap_err();
        assert_eq!(e.code, ErrorCode::CorruptData, "truncated to {len}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(
        Checkpoint::deserialize(&longer).unwrap_err().code,
        ErrorCode::CorruptData
    );
}

#[test]
fn another_version_or_algorithm_is_refused_by_name() {
    let bytes = sample(1).serialize().unwrap();
    let patch = |at: usize, v: u32| {
        let mut b = bytes.clone();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let n = b.len();
        let crc = crc32c::crc32c(&b[..n - 4]);
        b[n - 4..].copy_from_slice(&crc.to_le_bytes());
        Checkpoint::deserialize(&b).unwrap_err()
    };
    let e = patch(8, 2);
    assert!(e.message.contains("version 2"), "{e:?}");
    let e = patch(12, 9);
    assert!(e.message.contains("algorithm 9"), "{e:?}");
    let mut wrong = vec![0u8; 10];
    assert_eq!(
        sample(1).serialize_into(&mut wrong).unwrap_err().code,
        ErrorCode::OutOfRange
    );
}

/// Found by the ABI fuzzer: states overwritten through `sluice_rng_states` (here
/// with 0xFF, so the in-block index reads 0xFFFFFFFF) made the host draw index out
/// of bounds and panic on the stream's worker. cuRAND reads `x` for such a state;
/// so does the host now, and the draw completes.
#[test]
fn corrupt_states_draw_without_a_panic() {
    use sluice::ffi::*;
    let mut dev = sluice_device_t { bits: 0 };
    assert!(sluice_device_open_default(&mut dev).is_null());
    let mut s = sluice_stream_t { bits: 0 };
    assert!(sluice_stream_create(dev, 0, 0, &mut s).is_null());
    let mut rng = sluice_rng_t { bits: 0 };
    assert!(sluice_rng_create(s, 7, 4, &mut rng).is_null());
    let mut states = sluice_buffer_t { bits: 0 };
    assert!(sluice_rng_states(rng, &mut states).is_null());
    assert!(sluice_stream_memset(s, states, 0, 0xFF, 4 * 64).is_null());
    let mut out = sluice_buffer_t { bits: 0 };
    assert!(sluice_buffer_alloc(s, 4 * 4 * 8, &mut out).is_null());
    for dist in [SLUICE_RNG_U32, SLUICE_RNG_UNIFORM, SLUICE_RNG_NORMAL] {
        let e = sluice_rng_generate(s, rng, dist, SLUICE_RNG_LAYOUT_STATE_MAJOR, out, 0, 8);
        assert!(e.is_null());
    }
    let e = sluice_stream_synchronize(s);
    let code = sluice_error_code(e);
    sluice_error_free(e);
    assert_eq!(code, 0, "the draws from corrupt states failed");
    for e in [
        sluice_buffer_free(out),
        sluice_buffer_free(states),
        sluice_rng_destroy(rng),
        sluice_stream_destroy(s),
        sluice_device_close(dev),
    ] {
        assert!(e.is_null());
    }
}

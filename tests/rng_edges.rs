//! The RNG at its edges (found by the thirty-sixth session's review):
//! the seed a serialized checkpoint names after a replayed save, NULL bytes,
//! draws into foreign device memory and into the generator's own states,
//! and states whose position is past 3. Both backends.

mod common;

use common::kit;
use sluice::backend::CaptureMode;
use sluice::capture;
use sluice::rng::checkpoint::Checkpoint;
use sluice::rng::philox::PhiloxState;
use sluice::rng::{Distribution, Layout, Rng, RngCheckpoint};
use sluice::{Buffer, ErrorCode};

/// A save replayed in a graph writes another generator's states than the last
/// save call's: the serialized header names the states' own seed (their key),
/// and a restore from the checkpoint then reports it.
#[test]
fn a_serialized_checkpoint_names_the_seed_of_the_states_it_holds() {
    let k = kit();
    let s = k.stream();
    let a = Rng::create(&s, 1, 8).unwrap();
    let b = Rng::create(&s, 2, 8).unwrap();
    let ckpt = RngCheckpoint::create(&s, &a).unwrap();
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    b.save(&s, &ckpt).unwrap();
    let exec = capture::capture_end(&s).unwrap().instantiate().unwrap();
    a.save(&s, &ckpt).unwrap();
    exec.launch(&s).unwrap(); // B's save runs last
    let mut bytes = vec![0u8; ckpt.serialized_len()];
    ckpt.serialize_into(&mut bytes).unwrap();
    let back = Checkpoint::deserialize(&bytes).expect("the CRC covers the new header");
    let key_seed = back.states[0].key[0] as u64 | (back.states[0].key[1] as u64) << 32;
    assert_eq!(key_seed, 2, "the graph's save of B ran last");
    assert_eq!(back.seed, 2, "the header names seed {}", back.seed);
    assert_eq!(ckpt.seed(), 2);
    let c = Rng::create(&s, 99, 8).unwrap();
    c.restore(&s, &ckpt).unwrap();
    assert_eq!(c.seed(), 2);
    // Without a change of seed the header is the call's, as before.
    a.save(&s, &ckpt).unwrap();
    ckpt.serialize_into(&mut bytes).unwrap();
    assert_eq!(Checkpoint::deserialize(&bytes).unwrap().seed, 1);
}

/// `bytes` NULL with a length is a NULL argument; NULL with length 0 is an empty
/// byte string, as everywhere in the ABI, and empty is not a checkpoint (the
/// header said "`bytes` NULL" before; the C++ binding relies on the empty case).
#[test]
fn deserialize_of_null_bytes() {
    use sluice::ffi::*;
    let mut dev = sluice_device_t { bits: 0 };
    assert!(sluice_device_open_default(&mut dev).is_null());
    let mut ck = sluice_rng_checkpoint_t { bits: 0 };
    for (len, want) in [
        (8, SLUICE_ERROR_NULL_ARGUMENT),
        (0, SLUICE_ERROR_CORRUPT_DATA),
    ] {
        let e = sluice_rng_checkpoint_deserialize(dev, std::ptr::null(), len, &mut ck);
        let code = sluice_error_code(e);
        sluice_error_free(e);
        assert_eq!(code, want, "len {len}");
    }
    assert!(sluice_device_close(dev).is_null());
}

/// Foreign device memory (here another buffer's, wrapped) takes draws like the
/// library's own.
#[test]
fn generate_draws_into_foreign_device_memory() {
    let k = kit();
    let s = k.stream();
    let rng = Rng::create(&s, 7, 4).unwrap();
    let owner = k.buffer(&s, 4 * 8);
    let out = Buffer::wrap_device(&k.dev, owner.addr, 4 * 8 * 4, None, None, None).unwrap();
    rng.generate(&s, Distribution::U32, &out, 0, 8, Layout::SampleMajor)
        .unwrap();
    let got = k.read(&s, &out);
    let mut st: Vec<_> = (0..4).map(|i| PhiloxState::new(7, i, 0)).collect();
    let want: Vec<u32> = (0..8)
        .flat_map(|_| st.iter_mut().map(|s| s.next_u32()).collect::<Vec<_>>())
        .collect();
    assert_eq!(got, want);
}

/// A draw whose output overlaps the states it draws from is refused, through
/// the states' own buffer or another one over the same memory.
#[test]
fn generate_into_the_generators_own_states_is_refused() {
    let k = kit();
    let s = k.stream();
    let rng = Rng::create(&s, 3, 4).unwrap();
    let before = k.read(&s, rng.states());
    let states = rng.states().clone();
    let alias = Buffer::wrap_device(&k.dev, states.addr + 64, 128, None, None, None).unwrap();
    for out in [&states, &alias] {
        let e = rng
            .generate(&s, Distribution::U32, out, 0, 8, Layout::SampleMajor)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
        assert!(
            e.message.contains("overlaps the generator's own states"),
            "{e}"
        );
    }
    assert_eq!(
        k.read(&s, rng.states()),
        before,
        "a refused draw changed the states"
    );
}

/// States whose position is past 3 (written through the states' memory, as a
/// user kernel may) serialize and deserialize, and draw as cuRAND does: output.x.
#[test]
fn states_past_position_3_round_trip_and_draw_output_x() {
    let k = kit();
    let s = k.stream();
    let rng = Rng::create(&s, 3, 4).unwrap();
    let mut st: Vec<PhiloxState> = (0..4).map(|i| PhiloxState::new(3, i, 0)).collect();
    for (i, p) in st.iter_mut().enumerate() {
        p.state = [4, 5, 100, u32::MAX][i];
    }
    let bytes: Vec<u8> = st
        .iter()
        .flat_map(|p| {
            // SAFETY: PhiloxState is repr(C), 64 bytes of plain data.
            unsafe { std::slice::from_raw_parts((p as *const PhiloxState).cast::<u8>(), 64) }
                .to_vec()
        })
        .collect();
    sluice::ops::copy_from_host(&s, rng.states(), 0, &bytes).unwrap();
    let ckpt = RngCheckpoint::create(&s, &rng).unwrap();
    let mut ser = vec![0u8; ckpt.serialized_len()];
    ckpt.serialize_into(&mut ser).unwrap();
    let back = RngCheckpoint::deserialize(&k.dev, &ser).expect("what serialize wrote reads back");
    let r2 = Rng::create(&s, 5, 4).unwrap();
    r2.restore(&s, &back).unwrap();
    let out = k.buffer(&s, 4);
    r2.generate(&s, Distribution::U32, &out, 0, 1, Layout::SampleMajor)
        .unwrap();
    let want: Vec<u32> = st.iter_mut().map(|p| p.next_u32()).collect();
    assert_eq!(want, st.iter().map(|p| p.output[0]).collect::<Vec<_>>());
    assert_eq!(k.read(&s, &out), want);
}

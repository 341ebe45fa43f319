//! The RNG as a user drives it, on the backend `SLUICE_BACKEND` picks: draws against
//! cuRAND's recorded draws, saves and restores in stream order, checkpoints through
//! bytes and across processes, and draws inside a captured graph.

mod common;

use common::{kit, kit_alone};

use sluice::backend::CaptureMode;
use sluice::capture;
use sluice::rng::philox::PhiloxState;
use sluice::rng::{Distribution, Layout, Rng, RngCheckpoint, STATE_BYTES};
use sluice::{BackendKind, Buffer, ErrorCode, Stream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DISTS: [Distribution; 3] = [
    Distribution::U32,
    Distribution::Uniform,
    Distribution::Normal,
];

fn read_words(k: &common::Kit, s: &Arc<Stream>, b: &Buffer) -> Vec<u32> {
    k.read(s, b)
}

fn read_states(s: &Arc<Stream>, rng: &Rng) -> Vec<PhiloxState> {
    let mut bytes = vec![0u8; rng.n_states() * STATE_BYTES];
    sluice::ops::copy_to_host(s, &mut bytes, rng.states(), 0).unwrap();
    bytes.chunks_exact(STATE_BYTES).map(state_of).collect()
}

fn state_of(c: &[u8]) -> PhiloxState {
    let w = |i: usize| u32::from_le_bytes(c[4 * i..4 * i + 4].try_into().unwrap());
    PhiloxState {
        ctr: [w(0), w(1), w(2), w(3)],
        output: [w(4), w(5), w(6), w(7)],
        key: [w(8), w(9)],
        state: w(10),
        boxmuller_flag: w(11) as i32,
        boxmuller_flag_double: w(12) as i32,
        boxmuller_extra: f32::from_bits(w(13)),
        boxmuller_extra_double: f64::from_bits(u64::from_le_bytes(c[56..64].try_into().unwrap())),
    }
}

/// cuRAND's draws from `rng_vs_curand vectors`: count raw, uniform and normal
/// draws of n states (sample-major), then the final states.
struct Reference {
    seed: u64,
    n: usize,
    count: usize,
    draws: [Vec<u32>; 3],
    states: Vec<PhiloxState>,
}

fn reference(bytes: &[u8], seed: u64, n: usize, count: usize) -> Reference {
    let m = n * count;
    assert_eq!(bytes.len(), 3 * m * 4 + n * 64, "reference file size");
    let words = |k: usize| -> Vec<u32> {
        bytes[k * m * 4..(k + 1) * m * 4]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    Reference {
        seed,
        n,
        count,
        draws: [words(0), words(1), words(2)],
        states: bytes[3 * m * 4..].chunks_exact(64).map(state_of).collect(),
    }
}

/// Normals: bit for bit on cuda; on host within 1e-5 (`philox::box_muller`).
fn check_draws(what: &str, cuda: bool, got: &[u32], want: &[u32], dist: Distribution) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if dist == Distribution::Normal && !cuda {
            let (g, w) = (f32::from_bits(g), f32::from_bits(w));
            assert!(
                (g - w).abs() <= 1e-5,
                "{what} normal {i}: {g} vs cuRAND {w}"
            );
        } else {
            assert_eq!(g, w, "{what} {dist:?} draw {i}: {g:08x} vs cuRAND {w:08x}");
        }
    }
}

fn check_against(r: &Reference, layout: Layout) {
    let k = kit();
    let s = k.stream();
    let rng = Rng::create(&s, r.seed, r.n).unwrap();
    let out = k.buffer(&s, r.n * r.count);
    for (d, dist) in DISTS.into_iter().enumerate() {
        rng.generate(&s, dist, &out, 0, r.count, layout).unwrap();
        let mut got = read_words(&k, &s, &out);
        if layout == Layout::StateMajor {
            let t = got.clone();
            for i in 0..r.n {
                for j in 0..r.count {
                    got[j * r.n + i] = t[i * r.count + j];
                }
            }
        }
        check_draws(&format!("{layout:?}"), k.is_cuda(), &got, &r.draws[d], dist);
    }
    let states = read_states(&s, &rng);
    for (i, (g, w)) in states.iter().zip(&r.states).enumerate() {
        if k.is_cuda() {
            assert_eq!(g, w, "final state {i}");
        } else {
            let mut g = *g;
            assert!((g.boxmuller_extra - w.boxmuller_extra).abs() <= 1e-5);
            g.boxmuller_extra = w.boxmuller_extra;
            assert_eq!(&g, w, "final state {i} (host)");
        }
    }
}

#[test]
fn draws_equal_curands_recorded_draws() {
    let r = reference(
        include_bytes!("data/curand_philox_8x9.bin"),
        0x243F_6A88_85A3_08D3,
        8,
        9,
    );
    check_against(&r, Layout::SampleMajor);
    check_against(&r, Layout::StateMajor);
}

/// On the GPU the suite builds cuRAND's reference with nvcc in the same run and
/// names it here: `SLUICE_CURAND_REF=file:seed:n:count`.
#[test]
fn draws_equal_curand_built_in_this_run() {
    let Ok(spec) = std::env::var("SLUICE_CURAND_REF") else {
        eprintln!("SKIP draws_equal_curand_built_in_this_run: SLUICE_CURAND_REF unset");
        return;
    };
    let p: Vec<&str> = spec.split(':').collect();
    let seed = u64::from_str_radix(p[1].trim_start_matches("0x"), 16).unwrap();
    let r = reference(
        &std::fs::read(p[0]).unwrap(),
        seed,
        p[2].parse().unwrap(),
        p[3].parse().unwrap(),
    );
    check_against(&r, Layout::SampleMajor);
    check_against(&r, Layout::StateMajor);
    eprintln!(
        "checked {} states x {} draws x 3 distributions against cuRAND",
        r.n, r.count
    );
}

/// `count` draws of `dist` from each of the host Philox states, sample-major.
fn host_draws(host: &mut [PhiloxState], dist: Distribution, count: usize) -> Vec<u32> {
    let n = host.len();
    let mut want = vec![0u32; n * count];
    for (i, st) in host.iter_mut().enumerate() {
        for j in 0..count {
            want[j * n + i] = match dist {
                Distribution::U32 => st.next_u32(),
                Distribution::Uniform => st.next_uniform().to_bits(),
                Distribution::Normal => st.next_normal().to_bits(),
            };
        }
    }
    want
}

#[test]
fn the_host_philox_draws_what_the_backend_draws() {
    let k = kit();
    let s = k.stream();
    let (n, count) = (100, 13);
    let rng = Rng::create(&s, 99, n).unwrap();
    let out = k.buffer(&s, n * count);
    let mut host: Vec<PhiloxState> = (0..n as u64).map(|i| PhiloxState::new(99, i, 0)).collect();
    for dist in DISTS {
        rng.generate(&s, dist, &out, 0, count, Layout::SampleMajor)
            .unwrap();
        let got = read_words(&k, &s, &out);
        let want = host_draws(&mut host, dist, count);
        check_draws("host vs backend", false, &got, &want, dist);
    }
}

/// The state counts around each kernel choice on cuda (quad below 64K states,
/// one thread per state from 64K up), with counts that leave partial Philox
/// blocks: every choice draws what the host Philox draws, and leaves the states
/// where it leaves them (a second call continues the sequence).
#[test]
fn every_kernel_choice_draws_what_the_host_philox_draws() {
    let k = kit();
    let s = k.stream();
    for (n, count) in [
        (8 << 10, 37),
        ((64 << 10) - 4, 9),
        (64 << 10, 9),
        ((64 << 10) + 4, 6),
    ] {
        let rng = Rng::create(&s, 5, n).unwrap();
        let out = k.buffer(&s, n * count);
        let mut host: Vec<PhiloxState> = (0..n as u64).map(|i| PhiloxState::new(5, i, 0)).collect();
        for dist in DISTS.into_iter().chain(DISTS) {
            rng.generate(&s, dist, &out, 0, count, Layout::SampleMajor)
                .unwrap();
            let got = read_words(&k, &s, &out);
            let want = host_draws(&mut host, dist, count);
            check_draws(
                &format!("{n} states, {count} draws"),
                false,
                &got,
                &want,
                dist,
            );
        }
    }
}

fn draw(k: &common::Kit, s: &Arc<Stream>, rng: &Rng, out: &Buffer, steps: usize) -> Vec<u32> {
    let count = out.size / 4 / rng.n_states() / 3;
    let mut all = Vec::new();
    for step in 0..steps {
        let dist = DISTS[step % 3];
        for (part, d) in [dist, Distribution::U32, Distribution::Normal]
            .into_iter()
            .enumerate()
        {
            let off = part * rng.n_states() * count * 4;
            rng.generate(s, d, out, off, count, Layout::SampleMajor)
                .unwrap();
        }
        all.extend(read_words(k, s, out));
    }
    all
}

#[test]
fn save_run_restore_run_gives_the_same_draws() {
    let k = kit();
    let s = k.stream();
    let rng = Rng::create(&s, 7, 257).unwrap();
    let out = k.buffer(&s, 257 * 5 * 3);
    draw(&k, &s, &rng, &out, 4);
    let ckpt = RngCheckpoint::create(&s, &rng).unwrap();
    rng.save(&s, &ckpt).unwrap();
    let first = draw(&k, &s, &rng, &out, 6);
    rng.restore(&s, &ckpt).unwrap();
    let again = draw(&k, &s, &rng, &out, 6);
    assert_eq!(first, again);
    // Restoring on another stream is ordered after the draws on the first.
    let t = k.stream();
    rng.restore(&t, &ckpt).unwrap();
    let third = draw(&k, &t, &rng, &out, 6);
    assert_eq!(first, third);
}

#[test]
fn a_checkpoint_survives_serialize_and_deserialize() {
    let k = kit();
    let s = k.stream();
    let rng = Rng::create(&s, 0xfeed, 33).unwrap();
    let out = k.buffer(&s, 33 * 7 * 3);
    draw(&k, &s, &rng, &out, 2);
    let ckpt = RngCheckpoint::create(&s, &rng).unwrap();
    rng.save(&s, &ckpt).unwrap();
    let mut bytes = vec![0u8; ckpt.serialized_len()];
    ckpt.serialize_into(&mut bytes).unwrap();
    let want = draw(&k, &s, &rng, &out, 3);
    let back = RngCheckpoint::deserialize(&k.dev, &bytes).unwrap();
    assert_eq!((back.n_states(), back.seed()), (33, 0xfeed));
    let other = Rng::create(&s, 1, 33).unwrap();
    other.restore(&s, &back).unwrap();
    assert_eq!(other.seed(), 0xfeed);
    assert_eq!(draw(&k, &s, &other, &out, 3), want);
    // The same bytes a second time, and the host format reads them too.
    let mut again = vec![0u8; bytes.len()];
    back.serialize_into(&mut again).unwrap();
    assert_eq!(again, bytes);
    let host = sluice::rng::checkpoint::Checkpoint::deserialize(&bytes).unwrap();
    assert_eq!(host.states.len(), 33);
}

/// The child half of `a_checkpoint_resumes_in_another_process`.
#[test]
fn child_resume_from_file() {
    let Ok(path) = std::env::var("SLUICE_RNG_CHILD") else {
        return;
    };
    let k = kit();
    let s = k.stream();
    let bytes = std::fs::read(&path).unwrap();
    let ckpt = RngCheckpoint::deserialize(&k.dev, &bytes).unwrap();
    let rng = Rng::create(&s, 12345, ckpt.n_states()).unwrap();
    rng.restore(&s, &ckpt).unwrap();
    let out = k.buffer(&s, ckpt.n_states() * 4 * 3);
    let got = draw(&k, &s, &rng, &out, 5);
    let raw: Vec<u8> = got.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(format!("{path}.draws"), raw).unwrap();
}

#[test]
fn a_checkpoint_resumes_in_another_process() {
    let k = kit();
    let s = k.stream();
    let rng = Rng::create(&s, 31337, 64).unwrap();
    let out = k.buffer(&s, 64 * 4 * 3);
    draw(&k, &s, &rng, &out, 3);
    let ckpt = RngCheckpoint::create(&s, &rng).unwrap();
    rng.save(&s, &ckpt).unwrap();
    let mut bytes = vec![0u8; ckpt.serialized_len()];
    ckpt.serialize_into(&mut bytes).unwrap();
    let want = draw(&k, &s, &rng, &out, 5);
    let dir = std::env::temp_dir().join(format!("sluice-rng-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.bin");
    std::fs::write(&path, &bytes).unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_resume_from_file", "--test-threads=1"])
        .env("SLUICE_RNG_CHILD", &path)
        .status()
        .unwrap();
    assert!(status.success(), "child process failed");
    let raw = std::fs::read(format!("{}.draws", path.display())).unwrap();
    let got: Vec<u32> = raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, want, "the other process drew something else");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serialize_holds_the_save_point_while_the_stream_goes_on() {
    let k = kit_alone();
    let s = k.stream();
    let (rng, ckpt, saved, spin) = save_then_go_on(&k, &s, 1024);
    let mut bytes = vec![0u8; ckpt.serialized_len()];
    serialize_holds(&ckpt, &mut bytes, &saved, spin);
    let later = read_states(&s, &rng);
    assert_ne!(later, saved, "the draws after the save changed nothing");
}

/// An RNG of `n` states that drew, saved into a new checkpoint, then had a long
/// kernel and more draws queued after the save: (rng, checkpoint, saved states,
/// the kernel's length).
fn save_then_go_on(
    k: &common::Kit,
    s: &Arc<Stream>,
    n: usize,
) -> (Arc<Rng>, Arc<RngCheckpoint>, Vec<PhiloxState>, Duration) {
    let rng = Rng::create(s, 5, n).unwrap();
    let out = k.buffer(s, n * 8);
    rng.generate(s, Distribution::Uniform, &out, 0, 8, Layout::SampleMajor)
        .unwrap();
    let ckpt = RngCheckpoint::create(s, &rng).unwrap();
    rng.save(s, &ckpt).unwrap();
    let saved = read_states(s, &rng);
    let spin = Duration::from_millis(if k.is_cuda() { 800 } else { 400 });
    let other = k.buffer(s, 1024);
    k.fill(s, &other, 3, spin.as_nanos() as u64);
    rng.generate(s, Distribution::Normal, &out, 0, 8, Layout::SampleMajor)
        .unwrap();
    (rng, ckpt, saved, spin)
}

/// Serializes into `bytes` well before the long kernel ends, and the bytes hold the save point.
fn serialize_holds(ckpt: &RngCheckpoint, bytes: &mut [u8], saved: &[PhiloxState], spin: Duration) {
    let t0 = Instant::now();
    ckpt.serialize_into(bytes).unwrap();
    let took = t0.elapsed();
    assert!(
        took < spin / 2,
        "serialize waited for later work on the stream ({took:?})"
    );
    let back = sluice::rng::checkpoint::Checkpoint::deserialize(bytes).unwrap();
    assert!(back.states == saved, "the bytes are not the save point");
}

#[test]
fn every_bit_flip_and_truncation_of_device_bytes_is_refused() {
    let k = kit();
    let s = k.stream();
    let rng = Rng::create(&s, 11, 2).unwrap();
    let ckpt = RngCheckpoint::create(&s, &rng).unwrap();
    rng.save(&s, &ckpt).unwrap();
    let mut bytes = vec![0u8; ckpt.serialized_len()];
    ckpt.serialize_into(&mut bytes).unwrap();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            let e = RngCheckpoint::deserialize(&k.dev, &b)
                .err()
                .expect("a flipped bit was accepted");
            assert_eq!(e.code, ErrorCode::CorruptData, "byte {i} bit {bit}");
            assert!(!e.message.is_empty());
        }
    }
    for len in 0..bytes.len() {
        let e = RngCheckpoint::deserialize(&k.dev, &bytes[..len])
            .err()
            .expect("a truncation was accepted");
        assert_eq!(e.code, ErrorCode::CorruptData, "truncated to {len}");
    }
}

#[test]
fn a_replayed_graph_draws_anew_each_time_like_eager_draws() {
    let k = kit();
    let s = k.stream();
    let (n, count) = (300, 6);
    let eager = Rng::create(&s, 2024, n).unwrap();
    let graphed = Rng::create(&s, 2024, n).unwrap();
    let out = k.buffer(&s, n * count);
    let ckpt = RngCheckpoint::create(&s, &graphed).unwrap();
    let mut want = Vec::new();
    for _ in 0..3 {
        for dist in DISTS {
            eager
                .generate(&s, dist, &out, 0, count, Layout::SampleMajor)
                .unwrap();
            want.push(read_words(&k, &s, &out));
        }
    }
    let g_out = k.buffer(&s, n * count * 3);
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    for (p, dist) in DISTS.into_iter().enumerate() {
        graphed
            .generate(
                &s,
                dist,
                &g_out,
                p * n * count * 4,
                count,
                Layout::SampleMajor,
            )
            .unwrap();
    }
    graphed.save(&s, &ckpt).unwrap();
    let exec = capture::capture_end(&s).unwrap().instantiate().unwrap();
    let mut got = Vec::new();
    let mut saves = Vec::new();
    for _ in 0..3 {
        exec.launch(&s).unwrap();
        let all = read_words(&k, &s, &g_out);
        got.extend(all.chunks(n * count).map(|c| c.to_vec()));
        let mut b = vec![0u8; ckpt.serialized_len()];
        ckpt.serialize_into(&mut b).unwrap();
        saves.push(b);
    }
    assert_eq!(got, want, "3 replays must equal 3 eager draws");
    assert_ne!(got[0], got[3], "a replay repeated the previous draw");
    assert_ne!(saves[0], saves[1], "the captured save did not refresh");
    let eager_states = read_states(&s, &eager);
    let last = sluice::rng::checkpoint::Checkpoint::deserialize(&saves[2]).unwrap();
    assert_eq!(last.states, eager_states);
}

#[test]
fn bad_arguments_get_clear_errors() {
    let k = kit();
    let s = k.stream();
    let e = Rng::create(&s, 1, 0).err().unwrap();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("at least one state"), "{e:?}");
    let rng = Rng::create(&s, 1, 10).unwrap();
    let small = k.buffer(&s, 10 * 3);
    let e = rng
        .generate(&s, Distribution::U32, &small, 0, 4, Layout::SampleMajor)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange, "{e:?}");
    let e = rng
        .generate(&s, Distribution::U32, &small, 2, 1, Layout::SampleMajor)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e:?}");
    assert!(e.message.contains("multiple of 4"), "{e:?}");
    let pinned = Buffer::alloc_pinned(&k.dev, 400).unwrap();
    let e = rng
        .generate(&s, Distribution::U32, &pinned, 0, 1, Layout::SampleMajor)
        .unwrap_err();
    assert!(e.message.contains("device buffer"), "{e:?}");
    let other = Rng::create(&s, 1, 11).unwrap();
    let ckpt = RngCheckpoint::create(&s, &other).unwrap();
    let e = rng.save(&s, &ckpt).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("11 states"), "{e:?}");
    assert_eq!(
        rng.restore(&s, &ckpt).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    let mut wrong = vec![0u8; 3];
    assert_eq!(
        ckpt.serialize_into(&mut wrong).unwrap_err().code,
        ErrorCode::OutOfRange
    );
    // Nothing was drawn by the refused calls: the states are still fresh.
    let fresh: Vec<PhiloxState> = (0..10).map(|i| PhiloxState::new(1, i, 0)).collect();
    assert_eq!(read_states(&s, &rng), fresh);
    if k.dev.kind() == BackendKind::Host {
        assert!(Rng::create(&s, 1, usize::MAX / 2).is_err());
    }
}

#[test]
fn a_large_checkpoint_downloads_in_pieces_with_one_checksum() {
    let k = kit();
    let s = k.stream();
    let n = 300_000; // 19.2 MB of states: many pieces and checksum chunks
    let rng = Rng::create(&s, 8, n).unwrap();
    let ckpt = RngCheckpoint::create(&s, &rng).unwrap();
    rng.save(&s, &ckpt).unwrap();
    let mut bytes = vec![0u8; ckpt.serialized_len()];
    ckpt.serialize_into(&mut bytes).unwrap();
    let back = sluice::rng::checkpoint::Checkpoint::deserialize(&bytes).unwrap();
    assert_eq!(back.states.len(), n);
    for i in [0, 1, 131_071, 131_072, 262_144, n - 1] {
        assert_eq!(
            back.states[i],
            PhiloxState::new(8, i as u64, 0),
            "state {i}"
        );
    }
}

/// Serializes `ckpt` into a Vec (pageable: the staged path) and into sluice's
/// pinned memory (page-locked: the direct path); both must give the same bytes.
fn serialize_both_ways(k: &common::Kit, ckpt: &RngCheckpoint) -> Vec<u8> {
    let len = ckpt.serialized_len();
    let mut pageable = vec![0u8; len];
    ckpt.serialize_into(&mut pageable).unwrap();
    let pinned = Buffer::alloc_pinned(&k.dev, len).unwrap();
    let p = pinned.host_ptr().unwrap();
    assert!(k.dev.host_ptr_is_pinned(p, len));
    assert!(!k.dev.host_ptr_is_pinned(pageable.as_ptr(), len));
    // SAFETY: the pinned buffer holds `len` bytes and nothing else uses it.
    let direct = unsafe { std::slice::from_raw_parts_mut(p, len) };
    direct.fill(0xA5);
    ckpt.serialize_into(direct).unwrap();
    assert!(
        direct == pageable.as_slice(),
        "pinned and pageable bytes differ ({len} bytes)"
    );
    pageable
}

fn check_states(bytes: &[u8], seed: u64, n: usize) {
    let back = sluice::rng::checkpoint::Checkpoint::deserialize(bytes).unwrap();
    assert_eq!(back.states.len(), n);
    for i in [0, 1, n / 2, n.saturating_sub(2), n - 1]
        .into_iter()
        .filter(|&i| i < n)
    {
        assert_eq!(
            back.states[i],
            PhiloxState::new(seed, i as u64, 0),
            "state {i} of {n}"
        );
    }
}

#[test]
fn pinned_and_pageable_destinations_give_the_same_bytes_around_piece_boundaries() {
    let k = kit();
    let s = k.stream();
    // Checksum chunks are 32 KiB (512 states), staged pieces 1 MiB (16384
    // states), direct pieces 256 KiB at the end, each earlier one twice the next;
    // one thread up to 256 KiB.
    let chunk = (32 << 10) / STATE_BYTES;
    let last = (256 << 10) / STATE_BYTES;
    let piece = (1 << 20) / STATE_BYTES;
    for base in [
        1,
        chunk,
        3 * chunk,
        last,
        2 * last,
        3 * last,
        piece,
        2 * piece,
        5 * piece,
    ] {
        for n in [base.saturating_sub(1).max(1), base, base + 1] {
            let rng = Rng::create(&s, 77, n).unwrap();
            let ckpt = RngCheckpoint::create(&s, &rng).unwrap();
            check_states(&serialize_both_ways(&k, &ckpt), 77, n);
        }
    }
}

#[test]
fn a_checkpoint_of_many_pieces_serializes_the_same_into_pinned_and_pageable_memory() {
    let k = kit();
    let s = k.stream();
    let n = 19 * ((1 << 20) / STATE_BYTES) + 333; // 19 MiB and a bit: many pieces both ways
    let rng = Rng::create(&s, 9, n).unwrap();
    let out = k.buffer(&s, n * 4);
    rng.generate(&s, Distribution::Uniform, &out, 0, 4, Layout::SampleMajor)
        .unwrap();
    let ckpt = RngCheckpoint::create(&s, &rng).unwrap();
    let want = read_states(&s, &rng);
    let bytes = serialize_both_ways(&k, &ckpt);
    let back = sluice::rng::checkpoint::Checkpoint::deserialize(&bytes).unwrap();
    assert!(back.states == want, "the bytes are not the saved states");
    // Registered memory is page-locked too: the direct path.
    let mut reg = vec![0u8; bytes.len()];
    // SAFETY: `reg` outlives the registration (dropped first).
    let r = unsafe { Buffer::register(&k.dev, reg.as_mut_ptr(), reg.len()) }.unwrap();
    assert!(k.dev.host_ptr_is_pinned(reg.as_ptr(), reg.len()));
    ckpt.serialize_into(&mut reg).unwrap();
    drop(r);
    assert!(reg == bytes, "registered and pageable bytes differ");
}

#[test]
fn serialize_into_pinned_memory_holds_the_save_point_while_the_stream_goes_on() {
    let k = kit_alone();
    let s = k.stream();
    // 2.5 MB: several pieces, several threads.
    let (_rng, ckpt, saved, spin) = save_then_go_on(&k, &s, 40_000);
    let len = ckpt.serialized_len();
    let pinned = Buffer::alloc_pinned(&k.dev, len).unwrap();
    // SAFETY: the pinned buffer holds `len` bytes and nothing else uses it.
    let bytes = unsafe { std::slice::from_raw_parts_mut(pinned.host_ptr().unwrap(), len) };
    serialize_holds(&ckpt, bytes, &saved, spin);
}

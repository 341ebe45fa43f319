//! Module images (issue 2): kernels load and run from cubin and fatbin, not just PTX.
//!
//! On cuda, `SLUICE_TEST_CUBIN` and `SLUICE_TEST_FATBIN` name kernels/test_kernels.cu
//! built by nvcc for this GPU (`scripts/gpu-suite.sh run` sets them); when one is
//! unset the test writes a `SKIP` line to stderr and passes. On host every image
//! kind must give `Unsupported`.

mod common;
use common::{kit, Kit, PTX};
use sluice::module::Module;
use sluice::ops;
use sluice::{ErrorCode, LaunchDims, Stream};
use std::ffi::c_void;
use std::io::Write;
use std::sync::Arc;

const ELF_MAGIC: &[u8] = b"\x7fELF";
/// Fatbin magic 0xBA55ED50, little-endian.
const FATBIN_MAGIC: &[u8] = &[0x50, 0xED, 0x55, 0xBA];

/// Not a multiple of the block size, so the grid-stride bound is checked too.
const N: usize = 100_003;
/// Sentinel words after the first `N`, which no kernel may touch.
const GUARD: usize = 61;
const SENTINEL: u32 = 0xDEAD_BEEF;

/// Written straight to stderr: libtest captures `eprintln!` of passing tests.
fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
}

/// The bytes of the file named by `var`, or `None` when it is unset or empty.
fn image_from_env(var: &str) -> Option<Vec<u8>> {
    let path = std::env::var_os(var).filter(|p| !p.is_empty())?;
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{var}={}: cannot read: {e}", path.to_string_lossy()));
    assert!(!bytes.is_empty(), "{var}: the file is empty");
    Some(bytes)
}

/// A minimal ELF64 header (no program or section tables): passes the loader's checks.
fn elf_header() -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(ELF_MAGIC);
    h[4] = 2; // ELFCLASS64
    h[5] = 1; // little-endian
    h[6] = 1; // EV_CURRENT
    h
}

/// A fatbin header: magic, version 1, header size 16, payload size `payload`.
fn fatbin_header(payload: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(16);
    h.extend_from_slice(FATBIN_MAGIC);
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&16u16.to_le_bytes());
    h.extend_from_slice(&payload.to_le_bytes());
    h
}

/// Deterministic junk bytes.
fn garbage(n: usize, mut x: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

fn dims(n: usize) -> LaunchDims {
    LaunchDims {
        grid: [n.div_ceil(256).clamp(1, 1024) as u32, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// `sluice_fill` then `sluice_add` from `m` over the first `N` words of fresh
/// buffers; checks every word, and that the guard words are untouched.
fn fill_and_add(k: &Kit, s: &Arc<Stream>, m: &Arc<Module>, label: &str) {
    let fill = m
        .function(c"sluice_fill")
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let add = m
        .function(c"sluice_add")
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let missing = m.function(c"sluice_no_such_kernel").err();
    assert_eq!(
        missing.map(|e| e.code),
        Some(ErrorCode::NotFound),
        "{label}"
    );

    let (a, b) = (k.buffer(s, N + GUARD), k.buffer(s, N + GUARD));
    k.write(s, &a, &vec![SENTINEL; N + GUARD]);
    let src: Vec<u32> = (0..N + GUARD)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761))
        .collect();
    k.write(s, &b, &src);

    let value = 0x8765_4321u32;
    let (mut p, mut n, mut v) = (a.addr, N as u64, value);
    let mut args = [
        &mut p as *mut u64 as *mut c_void,
        &mut n as *mut u64 as *mut c_void,
        &mut v as *mut u32 as *mut c_void,
    ];
    let (r, w) = ([b.sync.clone()], [a.sync.clone()]);
    // SAFETY: args match sluice_fill(u32*, u64, u32); N words fit in `a`.
    unsafe { ops::launch(s, &fill, dims(N), &mut args, &[], &w) }
        .unwrap_or_else(|e| panic!("{label}: {e}"));

    let (mut d, mut sp, mut n) = (a.addr, b.addr, N as u64);
    let mut args = [
        &mut d as *mut u64 as *mut c_void,
        &mut sp as *mut u64 as *mut c_void,
        &mut n as *mut u64 as *mut c_void,
    ];
    // SAFETY: args match sluice_add(u32*, const u32*, u64); N words fit in both.
    unsafe { ops::launch(s, &add, dims(N), &mut args, &r, &w) }
        .unwrap_or_else(|e| panic!("{label}: {e}"));

    let got = k.read(s, &a);
    for (i, g) in got.iter().enumerate() {
        let want = if i < N {
            value.wrapping_add(src[i])
        } else {
            SENTINEL
        };
        assert_eq!(*g, want, "{label}: word {i}");
    }
    s.synchronize().unwrap_or_else(|e| panic!("{label}: {e}"));
}

/// Loads the image named by `var` and runs kernels from it (cuda), or checks that
/// host refuses it (`fallback` when the variable is unset).
fn run_image(test: &str, var: &str, magic: &[u8], fallback: Vec<u8>) {
    let k = kit();
    let img = image_from_env(var);
    if !k.is_cuda() {
        let img = img.unwrap_or(fallback);
        let e = Module::load(&k.dev, &img)
            .err()
            .expect("host loaded a module");
        assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
        assert!(e.message.contains("host"), "{e}");
        return;
    }
    let Some(img) = img else {
        skip(
            test,
            &format!("{var} is not set on the cuda backend (scripts/gpu-suite.sh run sets it)"),
        );
        return;
    };
    assert!(
        img.starts_with(magic),
        "{var} does not start with the expected magic {magic:02x?}: {:02x?}",
        &img[..img.len().min(8)]
    );
    let m = Module::load(&k.dev, &img).unwrap_or_else(|e| panic!("{var}: {e}"));
    let s = k.stream();
    fill_and_add(&k, &s, &m, var);
}

#[test]
fn kernels_run_from_a_cubin() {
    let mut fallback = elf_header();
    fallback.extend(garbage(64, 1));
    run_image(
        "kernels_run_from_a_cubin",
        "SLUICE_TEST_CUBIN",
        ELF_MAGIC,
        fallback,
    );
}

#[test]
fn kernels_run_from_a_fatbin() {
    let mut fallback = fatbin_header(64);
    fallback.extend(garbage(64, 2));
    run_image(
        "kernels_run_from_a_fatbin",
        "SLUICE_TEST_FATBIN",
        FATBIN_MAGIC,
        fallback,
    );
}

#[test]
fn corrupt_images_fail_with_module_load_and_lose_nothing() {
    let k = kit();
    // ELF magic, 64-bit, then junk: its header tables run past the end.
    let mut elf_junk = elf_header();
    elf_junk[0x20..0x40].copy_from_slice(&garbage(32, 3));
    elf_junk[0x28..0x30].copy_from_slice(&0x1000u64.to_le_bytes());
    elf_junk[0x3A..0x3E].copy_from_slice(&[64, 0, 8, 0]);
    elf_junk.extend(garbage(128, 4));
    // A sound ELF64 header (no tables) over junk: the driver itself must refuse it.
    let mut elf_body_junk = elf_header();
    elf_body_junk.extend(garbage(192, 5));
    // ELF magic then junk where the class byte should be.
    let mut elf_bad_class = ELF_MAGIC.to_vec();
    elf_bad_class.extend(garbage(60, 6));
    elf_bad_class[4] = 0x7E;
    // A fatbin cut inside its 16-byte header, and one claiming more than it holds.
    let fat_cut = fatbin_header(4096)[..10].to_vec();
    let mut fat_short = fatbin_header(4096);
    fat_short.extend(garbage(64, 7));

    let cases: [(&str, &[u8]); 5] = [
        ("cubin with junk header tables", &elf_junk),
        ("cubin with a junk body", &elf_body_junk),
        ("cubin with a bad ELF class", &elf_bad_class),
        ("fatbin cut inside its header", &fat_cut),
        ("fatbin shorter than its header says", &fat_short),
    ];
    let want = if k.is_cuda() {
        ErrorCode::ModuleLoad
    } else {
        ErrorCode::Unsupported
    };
    for (what, img) in cases {
        let e = Module::load(&k.dev, img)
            .err()
            .unwrap_or_else(|| panic!("{what}: loaded"));
        assert_eq!(e.code, want, "{what}: {e}");
        assert!(!e.message.is_empty(), "{what}: empty message");
        let msg = e.message.to_lowercase();
        assert!(msg.contains("module"), "{what}: {e}");
    }
    let e = Module::load(&k.dev, &[]).err().expect("empty image loaded");
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");

    // Nothing was lost: the device, its streams and (on cuda) PTX loading still work.
    let s = k.stream();
    if k.is_cuda() {
        let m = Module::load(&k.dev, PTX).expect("PTX after corrupt images");
        fill_and_add(&k, &s, &m, "PTX after corrupt images");
        // A name is the caller's error, never the driver's.
        let e = m.function(c"").err().expect("an empty name found a kernel");
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
        assert!(e.message.contains("empty"), "{e}");
        let e = m
            .function(c"no_such_kernel")
            .err()
            .expect("found no_such_kernel");
        assert_eq!(e.code, ErrorCode::NotFound, "{e}");
        assert!(e.message.contains("no_such_kernel"), "{e}");
    } else {
        let e = Module::load(&k.dev, PTX).err().expect("host loaded PTX");
        assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
        let x = k.buffer(&s, 4096);
        k.fill(&s, &x, 0x5EED, 0);
        assert!(k.read(&s, &x).iter().all(|&w| w == 0x5EED));
    }
    s.synchronize().expect("stream after corrupt images");
}

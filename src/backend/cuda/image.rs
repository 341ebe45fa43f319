//! Checks of module images before the driver reads them: cubin (ELF) and fatbin
//! headers must fit inside the image, and PTX gets its trailing NUL.

use crate::error::{Error, ErrorCode, Result};
use std::borrow::Cow;

fn le_u16(b: &[u8], at: usize) -> Option<u64> {
    let s: [u8; 2] = b.get(at..at.checked_add(2)?)?.try_into().ok()?;
    Some(u16::from_le_bytes(s).into())
}

fn le_u32(b: &[u8], at: usize) -> Option<u64> {
    let s: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(s).into())
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let s: [u8; 8] = b.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(s))
}

/// `off + count * size <= len`, without overflow.
fn table_fits(len: usize, off: u64, count: u64, size: u64) -> bool {
    count
        .checked_mul(size)
        .and_then(|n| n.checked_add(off))
        .is_some_and(|end| end <= len as u64)
}

const ELF_MAGIC: &[u8] = b"\x7fELF";
/// ELF64's header, section header and program header sizes.
const EHDR: usize = 64;
const SHDR: u64 = 64;
const PHDR: u64 = 56;
/// A section type whose contents take no bytes of the file (`.bss`, `.nv.shared.*`).
const SHT_NOBITS: u64 = 8;

/// Checks that a cubin's ELF header, header tables, and every section's and
/// segment's bytes lie inside `image`: the driver takes no length and reads where
/// they point.
fn check_elf(image: &[u8]) -> std::result::Result<(), &'static str> {
    let len = image.len();
    if image.get(4) != Some(&2) {
        return Err("cubin is not a 64-bit ELF file");
    }
    if len < EHDR {
        return Err("cubin is shorter than its ELF header");
    }
    let field = |at, size| match size {
        2 => le_u16(image, at),
        4 => le_u32(image, at),
        _ => le_u64(image, at),
    };
    let truncated = "cubin is truncated (a table or section runs past the end)";
    let [phoff, shoff] = [0x20, 0x28].map(|at| field(at, 8).unwrap_or(0));
    let [phsz, phn, shsz, shn, shstrndx] =
        [0x36, 0x38, 0x3A, 0x3C, 0x3E].map(|at| field(at, 2).unwrap_or(0));
    if (phn != 0 && phsz != PHDR) || ((shn != 0 || shoff != 0) && shsz != SHDR) {
        return Err("cubin's header table entries are not ELF64's sizes");
    }
    // With more than 0xff00 sections, e_shnum is 0 and section 0 holds the count.
    let sections = if shn == 0 && shoff != 0 {
        if !table_fits(len, shoff, 1, SHDR) {
            return Err(truncated);
        }
        field(shoff as usize + 0x20, 8).unwrap_or(0)
    } else {
        shn
    };
    if !table_fits(len, phoff, phn, PHDR) || !table_fits(len, shoff, sections, SHDR) {
        return Err(truncated);
    }
    if shstrndx != 0 && shstrndx != 0xFFFF && shstrndx >= sections {
        return Err("cubin's section name table index is past its sections");
    }
    for i in 0..sections {
        let at = (shoff + i * SHDR) as usize;
        let kind = field(at + 4, 4).unwrap_or(0);
        let (off, size) = (
            field(at + 0x18, 8).unwrap_or(0),
            field(at + 0x20, 8).unwrap_or(0),
        );
        if i != 0 && kind != SHT_NOBITS && !table_fits(len, off, 1, size) {
            return Err(truncated);
        }
    }
    for i in 0..phn {
        let at = (phoff + i * PHDR) as usize;
        let (off, size) = (
            field(at + 8, 8).unwrap_or(0),
            field(at + 0x20, 8).unwrap_or(0),
        );
        if !table_fits(len, off, 1, size) {
            return Err(truncated);
        }
    }
    Ok(())
}
/// Fatbin magic 0xBA55ED50, little-endian.
const FATBIN_MAGIC: &[u8] = &[0x50, 0xED, 0x55, 0xBA];

/// Validates a module image: cubin (ELF) and fatbin headers must fit inside it (the
/// driver reads sizes from them), and PTX gets a trailing NUL if it lacks one.
pub(super) fn prepare_image(image: &[u8]) -> Result<Cow<'_, [u8]>> {
    let bad = |what: &str| {
        Error::new(
            ErrorCode::ModuleLoad,
            format!("invalid module image: {what}"),
        )
    };
    if image.is_empty() {
        return Err(Error::invalid_argument("module image is empty"));
    }
    if image.starts_with(ELF_MAGIC) {
        check_elf(image).map_err(bad)?;
        return Ok(Cow::Borrowed(image));
    }
    if image.starts_with(FATBIN_MAGIC) {
        // Fatbin header: magic u32, version u16, header size u16 @6, payload size u64 @8.
        let (Some(hdr), Some(body)) = (le_u16(image, 6), le_u64(image, 8)) else {
            return Err(bad("fatbin is shorter than its header"));
        };
        if !table_fits(image.len(), hdr, 1, body) {
            return Err(bad("fatbin is truncated (its header claims more bytes)"));
        }
        return Ok(Cow::Borrowed(image));
    }
    // PTX text: the driver reads up to the first NUL.
    if image.last() == Some(&0) {
        Ok(Cow::Borrowed(image))
    } else {
        let mut v = Vec::with_capacity(image.len() + 1);
        v.extend_from_slice(image);
        v.push(0);
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::super::expect_err;
    use super::*;

    #[test]
    fn ptx_gets_a_nul_and_binaries_are_checked() {
        let ptx = b".version 7.0\n.target sm_50\n";
        let img = prepare_image(ptx).expect("ptx");
        assert_eq!(img.last(), Some(&0));
        assert_eq!(img.len(), ptx.len() + 1);
        let nul = b"ptx\0";
        assert!(matches!(prepare_image(nul), Ok(Cow::Borrowed(_))));
        assert_eq!(
            expect_err(prepare_image(b"")).code,
            ErrorCode::InvalidArgument
        );
        // Truncated ELF and fatbin images are refused, not read past the end.
        assert_eq!(
            expect_err(prepare_image(b"\x7fELF\x02\x01")).code,
            ErrorCode::ModuleLoad
        );
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(ELF_MAGIC);
        elf[4] = 2;
        assert!(prepare_image(&elf).is_ok());
        elf[0x28] = 0xff; // e_shoff past the end
        elf[0x3C] = 1;
        elf[0x3A] = 64;
        assert!(prepare_image(&elf).is_err());
        let mut fat = vec![0u8; 16];
        fat[..4].copy_from_slice(FATBIN_MAGIC);
        fat[6] = 16;
        assert!(prepare_image(&fat).is_ok());
        fat[8] = 1;
        assert!(prepare_image(&fat).is_err());
    }

    /// A cubin NVRTC 13.0 made from `kernels/test_kernels.cu` for sm_90.
    const CUBIN: &[u8] = include_bytes!("../../../tests/data/test_kernels.sm_90.cubin");

    fn elf64(len: usize) -> Vec<u8> {
        let mut h = vec![0u8; len];
        h[..4].copy_from_slice(ELF_MAGIC);
        h[4] = 2;
        h
    }

    #[test]
    fn a_real_cubin_passes_and_every_truncation_of_it_is_refused() {
        assert!(prepare_image(CUBIN).is_ok());
        for len in 4..CUBIN.len() {
            let e = expect_err(prepare_image(&CUBIN[..len]));
            assert_eq!(e.code, ErrorCode::ModuleLoad, "truncated to {len}: {e}");
        }
        // Cubins of other targets and sources, where a directory of them is given.
        if let Ok(dir) = std::env::var("SLUICE_TEST_CUBIN_DIR") {
            for f in std::fs::read_dir(dir).expect("SLUICE_TEST_CUBIN_DIR") {
                let path = f.expect("entry").path();
                let img = std::fs::read(&path).expect("cubin");
                assert!(prepare_image(&img).is_ok(), "{path:?} was refused");
            }
        }
    }

    /// The driver reads a cubin's 64-byte header and whole table entries, whatever
    /// the header says: a shorter image, or tables of entries of size 0 at the
    /// image's end, would make it read past the end (the review's two finds).
    #[test]
    fn headers_and_tables_the_driver_would_read_past_the_end_are_refused() {
        for len in [62, 63] {
            assert!(prepare_image(&elf64(len)).is_err(), "{len} bytes");
        }
        let mut img = elf64(64);
        img[0x28..0x30].copy_from_slice(&64u64.to_le_bytes()); // e_shoff = len
        img[0x3C..0x3E].copy_from_slice(&100u16.to_le_bytes()); // e_shnum, e_shentsize 0
        assert!(prepare_image(&img).is_err());
        let mut img = elf64(64);
        img[0x20..0x28].copy_from_slice(&64u64.to_le_bytes()); // e_phoff = len
        img[0x38..0x3A].copy_from_slice(&5u16.to_le_bytes()); // e_phnum, e_phentsize 0
        assert!(prepare_image(&img).is_err());
        // A section whose bytes run past the end, and a name table index past the sections.
        let mut img = CUBIN.to_vec();
        let shoff = le_u64(&img, 0x28).unwrap() as usize;
        let last = shoff + (le_u16(&img, 0x3C).unwrap() as usize - 1) * 64;
        img[last + 4..last + 8].copy_from_slice(&1u32.to_le_bytes()); // SHT_PROGBITS
        img[last + 0x20..last + 0x28].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(prepare_image(&img).is_err());
        let mut img = CUBIN.to_vec();
        img[0x3E..0x40].copy_from_slice(&0xFF00u16.to_le_bytes());
        assert!(prepare_image(&img).is_err());
    }
}

//! Checks of module images before the driver reads them: cubin (ELF) and fatbin
//! headers must fit inside the image, and PTX gets its trailing NUL.

use crate::error::{Error, ErrorCode, Result};
use std::borrow::Cow;

fn le_u16(b: &[u8], at: usize) -> Option<u64> {
    let s: [u8; 2] = b.get(at..at.checked_add(2)?)?.try_into().ok()?;
    Some(u16::from_le_bytes(s).into())
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
        // ELF64 header: e_phoff @0x20, e_shoff @0x28, e_phentsize @0x36, e_phnum @0x38,
        // e_shentsize @0x3A, e_shnum @0x3C.
        if image.get(4) != Some(&2) {
            return Err(bad("cubin is not a 64-bit ELF file"));
        }
        let fields = (
            le_u64(image, 0x20),
            le_u64(image, 0x28),
            le_u16(image, 0x36),
            le_u16(image, 0x38),
            le_u16(image, 0x3A),
            le_u16(image, 0x3C),
        );
        let (Some(phoff), Some(shoff), Some(phsz), Some(phn), Some(shsz), Some(shn)) = fields
        else {
            return Err(bad("cubin is shorter than its ELF header"));
        };
        if !table_fits(image.len(), phoff, phn, phsz) || !table_fits(image.len(), shoff, shn, shsz)
        {
            return Err(bad(
                "cubin is truncated (its header tables run past the end)",
            ));
        }
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
}

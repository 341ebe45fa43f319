//! The header's enum constants and the Rust enums are one list: every `#define` of
//! an enum prefix in include/sluice.h names exactly one variant with that value, and
//! every variant has its `#define`.

use sluice::backend::{BackendKind, CaptureMode};
use sluice::engine::EngineMode;
use sluice::graph::GraphUpdate;
use sluice::log::LogLevel;
use sluice::memory::BufferKind;
use sluice::ErrorCode;
use std::collections::BTreeMap;

const HEADER: &str = include_str!("../include/sluice.h");

/// The header's `#define NAME value` lines whose name starts with `prefix`.
fn defines(prefix: &str) -> BTreeMap<String, u32> {
    HEADER
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|l| l.split_once(' '))
        .filter(|(name, _)| name.starts_with(prefix))
        .filter_map(|(name, v)| Some((name.to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// Checks one enum against its constants.
fn check(prefix: &str, variants: &[(&std::ffi::CStr, u32)]) {
    let header = defines(prefix);
    let rust: BTreeMap<String, u32> = variants
        .iter()
        .map(|(n, v)| (n.to_str().unwrap().to_string(), *v))
        .collect();
    assert_eq!(header, rust, "{prefix}* in the header vs the Rust enum");
}

macro_rules! check_enum {
    ($ty:ty, $prefix:literal) => {
        check(
            $prefix,
            &<$ty>::ALL
                .iter()
                .map(|v| (v.c_name(), *v as u32))
                .collect::<Vec<_>>(),
        );
        for v in <$ty>::ALL {
            assert_eq!(<$ty>::from_u32(*v as u32), Some(*v));
        }
    };
}

#[test]
fn every_c_enum_matches_its_header_constants() {
    check_enum!(ErrorCode, "SLUICE_ERROR_");
    check_enum!(BackendKind, "SLUICE_BACKEND_");
    check_enum!(CaptureMode, "SLUICE_CAPTURE_");
    check_enum!(BufferKind, "SLUICE_BUFFER_");
    check_enum!(EngineMode, "SLUICE_ENGINE_");
    check_enum!(GraphUpdate, "SLUICE_GRAPH_UPDATE_");
    check_enum!(LogLevel, "SLUICE_LOG_");
}

#[test]
fn unknown_values_are_rejected() {
    assert_eq!(ErrorCode::from_u32(0), None);
    assert_eq!(ErrorCode::from_u32(ErrorCode::ALL.len() as u32 + 1), None);
    assert_eq!(CaptureMode::from_u32(3), None);
    assert_eq!(EngineMode::from_u32(2), None);
}

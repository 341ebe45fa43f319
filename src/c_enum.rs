//! Enums that C sees as integer constants, each declared once: [`c_enum!`] makes the
//! Rust enum, its C names, `from_u32` and `ALL` from one list, and
//! [`constants_source`] writes them as plain constants into `src/ffi/c_constants.rs`
//! (cbindgen cannot see through a macro), from which cbindgen writes the header.

/// Declares a `repr(u32)` enum whose variants C sees as `#define PREFIX_NAME value`.
macro_rules! c_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $prefix:literal {
            $( $(#[doc = $doc:literal])* $variant:ident = $value:literal => $cname:ident, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $name {
            $( $(#[doc = $doc])* $variant = $value, )*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// Converts a raw value coming from C; unknown values give `None`.
            pub fn from_u32(v: u32) -> Option<$name> {
                match v {
                    $($value => Some($name::$variant),)*
                    _ => None,
                }
            }

            /// The C constant's name, for example `SLUICE_ERROR_INVALID_HANDLE`.
            pub fn c_name(self) -> &'static std::ffi::CStr {
                match self {
                    $($name::$variant => {
                        const NAME: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
                            concat!($prefix, stringify!($cname), "\0").as_bytes(),
                        ) {
                            Ok(c) => c,
                            Err(_) => panic!("a C name has no NUL"),
                        };
                        NAME
                    })*
                }
            }

            /// (name, value, doc) of each C constant.
            pub(crate) const C_CONSTANTS: &'static [(&'static str, u32, &'static str)] = &[
                $((concat!($prefix, stringify!($cname)), $value, concat!($($doc, "\n"),*)),)*
            ];
        }
    };
}
pub(crate) use c_enum;

/// `src/ffi/c_constants.rs`: the C constants of every C-visible enum as Rust
/// constants, so that cbindgen writes them into the header.
#[doc(hidden)]
pub fn constants_source() -> String {
    let lists: [&[(&str, u32, &str)]; 10] = [
        crate::backend::BackendKind::C_CONSTANTS,
        crate::backend::CaptureMode::C_CONSTANTS,
        crate::error::ErrorCode::C_CONSTANTS,
        crate::memory::BufferKind::C_CONSTANTS,
        crate::engine::EngineMode::C_CONSTANTS,
        crate::graph::GraphUpdate::C_CONSTANTS,
        crate::log::LogLevel::C_CONSTANTS,
        crate::rng::Distribution::C_CONSTANTS,
        crate::rng::Layout::C_CONSTANTS,
        crate::dlpack::DlpackFormat::C_CONSTANTS,
    ];
    let mut out = String::from(
        "//! The constants of the enums C sees. Generated from their `c_enum!` lists by\n\
         //! `scripts/gen-header.sh` (examples/c_constants.rs); do not edit.\n",
    );
    for (name, value, doc) in lists.into_iter().flatten() {
        out.push('\n');
        for line in doc.lines() {
            out.push_str(&format!("///{}\n", line.trim_end()));
        }
        out.push_str(&format!("pub const {name}: u32 = {value};\n"));
    }
    out
}

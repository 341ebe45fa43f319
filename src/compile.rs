//! Runtime kernel compilation (`sluice_module_compile`, issue 14): CUDA C source to
//! a loaded [`Module`] through the backend's compiler (NVRTC on cuda; the host
//! backend has none and says so), with sluice's built-in headers and the opt-in
//! kernel cache ([`crate::kernel_cache`]).

use crate::backend::{BuiltinHeader, CompilePlan};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel_cache::{self, CacheOutcome, Key, KeyBuilder};
use crate::module::Module;
use std::ffi::CStr;
use std::path::Path;
use std::sync::Arc;

/// `include/sluice/rng.cuh`, the RNG's device side, NUL-terminated for NVRTC.
const RNG_CUH: &CStr = match CStr::from_bytes_with_nul(
    concat!(include_str!("../include/sluice/rng.cuh"), "\0").as_bytes(),
) {
    Ok(c) => c,
    Err(_) => panic!("include/sluice/rng.cuh contains a NUL byte"),
};

/// Headers every compiled source may `#include` with no include path:
/// `<sluice/rng.cuh>`.
pub const BUILTIN_HEADERS: &[BuiltinHeader] = &[BuiltinHeader {
    name: c"sluice/rng.cuh",
    text: RNG_CUH,
}];

/// The program name used when the caller gives none.
pub const DEFAULT_NAME: &CStr = c"sluice_kernel.cu";

/// True when an option makes the compiler read files (include paths, pre-included
/// headers), whose contents a cache key cannot see.
fn names_files(option: &str) -> bool {
    ["-I", "--include-path", "--pre-include", "-include"]
        .iter()
        .any(|p| option.starts_with(p))
}

/// True when the source includes a file by path: a quoted name, or an absolute
/// one in brackets (names in brackets are NVRTC's and sluice's built-in
/// headers), whose contents a cache key cannot see.
fn includes_files(source: &CStr) -> bool {
    String::from_utf8_lossy(source.to_bytes())
        .lines()
        .any(|line| {
            let Some(rest) = line.trim_start().strip_prefix('#') else {
                return false;
            };
            let Some(name) = rest.trim_start().strip_prefix("include") else {
                return false;
            };
            let name = name.trim_start();
            name.starts_with('"') || name.starts_with("</")
        })
}

/// The cache key of one compile: the source, name, plan and built-in headers.
fn key_of(source: &CStr, name: &CStr, plan: &CompilePlan) -> Key {
    let mut k = KeyBuilder::default();
    k.part(source.to_bytes()).part(name.to_bytes());
    k.part(&(plan.options.len() as u64).to_le_bytes());
    for o in &plan.options {
        k.part(o.as_bytes());
    }
    k.part(plan.target.as_bytes())
        .part(&[u8::from(plan.cubin)])
        .part(plan.compiler.as_bytes())
        .part(&plan.driver_version.to_le_bytes());
    for h in BUILTIN_HEADERS {
        k.part(h.name.to_bytes()).part(h.text.to_bytes());
    }
    k.finish()
}

impl Module {
    /// Compiles CUDA C `source` and loads the result on `device`, with the cache
    /// that `SLUICE_KERNEL_CACHE` names (none when unset). See [`Module::compile_cached`].
    pub fn compile(
        device: &Arc<Device>,
        source: &CStr,
        name: Option<&CStr>,
        options: &[String],
    ) -> Result<Arc<Module>> {
        let dir = kernel_cache::dir_from_env();
        Ok(Module::compile_cached(device, source, name, options, dir.as_deref())?.0)
    }

    /// Compiles CUDA C `source` and loads the result on `device`.
    ///
    /// - `name` names the program in diagnostics (default `sluice_kernel.cu`).
    /// - `options` go to the compiler as they are. Without an architecture option
    ///   the target is the device's own (`--gpu-architecture=sm_XY`, a cubin), or
    ///   PTX for the newest architecture the compiler knows when it predates the
    ///   device.
    /// - Sources may `#include <sluice/rng.cuh>` ([`BUILTIN_HEADERS`]).
    /// - Kernels looked up by name need `extern "C"` (NVRTC compiles C++).
    /// - `cache`: a kernel cache directory. Options naming include paths or
    ///   pre-included files bypass it.
    ///
    /// Errors: a compile error is `Compile` with the compiler's log in the message;
    /// no compiler (the host backend, or no NVRTC) is `Unsupported`.
    pub fn compile_cached(
        device: &Arc<Device>,
        source: &CStr,
        name: Option<&CStr>,
        options: &[String],
        cache: Option<&Path>,
    ) -> Result<(Arc<Module>, CacheOutcome)> {
        if source.is_empty() {
            return Err(Error::invalid_argument("source is empty"));
        }
        if let Some(i) = options
            .iter()
            .position(|o| o.is_empty() || o.contains('\0'))
        {
            return Err(Error::invalid_argument(format!(
                "option {i} is empty or contains a NUL byte"
            )));
        }
        let name = name.filter(|n| !n.is_empty()).unwrap_or(DEFAULT_NAME);
        let plan = device.backend.compile_plan(options)?;
        let dir =
            cache.filter(|_| !options.iter().any(|o| names_files(o)) && !includes_files(source));
        let key = key_of(source, name, &plan);
        let mut outcome = match (cache, dir) {
            (None, _) => CacheOutcome::Off,
            (Some(_), None) => CacheOutcome::Bypassed,
            (_, Some(dir)) => match kernel_cache::load(dir, &key) {
                Ok(Some(image)) => match Module::load(device, &image) {
                    Ok(m) => {
                        kernel_cache::count(CacheOutcome::Hit);
                        return Ok((m, CacheOutcome::Hit));
                    }
                    Err(e) => {
                        crate::log::warn(|| {
                            format!("kernel cache: an entry would not load, recompiling: {e}")
                        });
                        CacheOutcome::Rejected
                    }
                },
                Ok(None) => CacheOutcome::Miss,
                Err(why) => {
                    crate::log::warn(|| format!("kernel cache: ignoring an entry: {why}"));
                    CacheOutcome::Rejected
                }
            },
        };
        let image = device
            .backend
            .compile(source, name, BUILTIN_HEADERS, &plan)?;
        // Loaded before it is stored: an image the driver refuses is never cached.
        let module = Module::load(device, &image).map_err(|e| {
            e.context(format_args!(
                "loading the image compiled for {}",
                plan.target
            ))
        })?;
        if let Some(dir) = dir {
            if let Err(e) = kernel_cache::store(dir, &key, &image) {
                crate::log::warn(|| {
                    format!("kernel cache: cannot store in {}: {e}", dir.display())
                });
                if outcome == CacheOutcome::Rejected {
                    outcome = CacheOutcome::Miss;
                }
            }
        }
        kernel_cache::count(outcome);
        Ok((module, outcome))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(opts: &[&str]) -> CompilePlan {
        CompilePlan {
            options: opts.iter().map(|s| s.to_string()).collect(),
            target: "sm_86".into(),
            cubin: true,
            compiler: "NVRTC 12.9".into(),
            driver_version: 12090,
        }
    }

    #[test]
    fn the_key_sees_every_input() {
        let base = key_of(c"src", c"a.cu", &plan(&["-O3"]));
        assert_eq!(base, key_of(c"src", c"a.cu", &plan(&["-O3"])));
        assert_ne!(base, key_of(c"src2", c"a.cu", &plan(&["-O3"])));
        assert_ne!(base, key_of(c"src", c"b.cu", &plan(&["-O3"])));
        assert_ne!(base, key_of(c"src", c"a.cu", &plan(&[])));
        let mut p = plan(&["-O3"]);
        p.target = "sm_90".into();
        assert_ne!(base, key_of(c"src", c"a.cu", &p));
        let mut p = plan(&["-O3"]);
        p.compiler = "NVRTC 13.0".into();
        assert_ne!(base, key_of(c"src", c"a.cu", &p));
        let mut p = plan(&["-O3"]);
        p.driver_version = 13000;
        assert_ne!(base, key_of(c"src", c"a.cu", &p));
    }

    #[test]
    fn include_options_bypass_the_cache() {
        assert!(names_files("-I/opt/inc"));
        assert!(names_files("--include-path=/x"));
        assert!(names_files("--pre-include=x.h"));
        assert!(!names_files("-O3"));
        assert!(!names_files("--gpu-architecture=sm_80"));
    }

    #[test]
    fn sources_that_include_files_bypass_the_cache() {
        assert!(includes_files(
            c"#include \"mine.h\"\n__global__ void k() {}"
        ));
        assert!(includes_files(c"  #  include </opt/x.h>"));
        assert!(!includes_files(
            c"#include <sluice/rng.cuh>\n#include <cuda_fp16.h>"
        ));
        assert!(!includes_files(
            c"// #include \"commented.h\" is text\nint x;"
        ));
    }

    #[test]
    fn the_rng_header_is_built_in() {
        assert_eq!(BUILTIN_HEADERS[0].name, c"sluice/rng.cuh");
        let text = BUILTIN_HEADERS[0].text.to_str().expect("utf-8");
        assert!(text.contains("SLUICE_RNG_CUH"));
    }
}

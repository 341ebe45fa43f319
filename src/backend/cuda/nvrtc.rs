//! NVRTC, CUDA's runtime compiler: found and probed once per process (as the driver
//! is), every entry point looked up up front, the choice of target architecture, and
//! the compile of one program.
//!
//! NVRTC is loaded at run time, never linked. Where it is looked for, in order:
//! 1. the names cudarc's `nvrtc` module tries (`libnvrtc.so`, `libnvrtc.so.12`, ...)
//!    on the loader's search path (`LD_LIBRARY_PATH`, the ld.so cache);
//! 2. [`EXTRA_NAMES`] there too (cudarc built for CUDA 12 does not try `.so.13`);
//! 3. the same names in `$CUDA_PATH/lib64`, `$CUDA_HOME/lib64` and
//!    `/usr/local/cuda/lib64` ([`search_dirs`]).
//!
//! NVRTC opens its builtins library (`libnvrtc-builtins.so.MAJOR.MINOR`) by name when
//! it compiles. NVRTC 12 finds it beside itself (its RUNPATH is `$ORIGIN`); for
//! versions that search only the loader's path the probe opens the one beside
//! libnvrtc first, and the loader then matches the name to the loaded soname.

use super::device::CudaDevice;
use super::driver::log_text;
use crate::backend::{BuiltinHeader, CompilePlan};
use crate::error::{Error, ErrorCode, Result};
use cudarc::nvrtc::sys::{self as nsys, nvrtcProgram};
use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::catch_unwind;
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

/// `nvrtcResult` values we branch on.
const NVRTC_SUCCESS: u32 = 0;
const NVRTC_ERROR_OUT_OF_MEMORY: u32 = 1;
const NVRTC_ERROR_BUILTIN_OPERATION_FAILURE: u32 = 7;

/// Library names tried on the search path after cudarc's own.
pub(super) const EXTRA_NAMES: &[&str] = &["libnvrtc.so.13"];
/// Library names tried in each of [`search_dirs`].
const DIR_NAMES: &[&str] = &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];
/// The longest compile log kept in an error message.
const MAX_LOG_BYTES: usize = 64 * 1024;

/// Declares [`Fns`]: one field per NVRTC entry point, named like the symbol.
macro_rules! nvrtc_api {
    ($($name:ident: fn($($arg:ty),* $(,)?) -> $ret:ty;)*) => {
        /// Every NVRTC entry point sluice calls, looked up by the probe.
        #[allow(non_snake_case)]
        struct Fns {
            $($name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl Fns {
            /// Every NVRTC symbol sluice calls.
            #[cfg(test)]
            const SYMBOLS: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Looks up every symbol through `lookup` (NUL-terminated name in, address
            /// or NULL out).
            fn load(lookup: &dyn Fn(&[u8]) -> *const c_void) -> Result<Fns> {
                Ok(Fns {
                    $($name: {
                        let p = lookup(concat!(stringify!($name), "\0").as_bytes());
                        if p.is_null() {
                            return Err(unavailable(concat!(
                                "NVRTC too old: missing ",
                                stringify!($name)
                            )));
                        }
                        // SAFETY: non-null, and nvrtc.h declares this signature
                        // (nvrtcResult as u32).
                        unsafe {
                            std::mem::transmute::<*const c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p)
                        }
                    },)*
                })
            }
        }
    };
}

nvrtc_api! {
    nvrtcVersion: fn(*mut c_int, *mut c_int) -> u32;
    nvrtcGetErrorString: fn(u32) -> *const c_char;
    nvrtcGetNumSupportedArchs: fn(*mut c_int) -> u32;
    nvrtcGetSupportedArchs: fn(*mut c_int) -> u32;
    nvrtcCreateProgram: fn(
        *mut nvrtcProgram, *const c_char, *const c_char, c_int,
        *const *const c_char, *const *const c_char,
    ) -> u32;
    nvrtcDestroyProgram: fn(*mut nvrtcProgram) -> u32;
    nvrtcCompileProgram: fn(nvrtcProgram, c_int, *const *const c_char) -> u32;
    nvrtcGetProgramLogSize: fn(nvrtcProgram, *mut usize) -> u32;
    nvrtcGetProgramLog: fn(nvrtcProgram, *mut c_char) -> u32;
    nvrtcGetPTXSize: fn(nvrtcProgram, *mut usize) -> u32;
    nvrtcGetPTX: fn(nvrtcProgram, *mut c_char) -> u32;
    nvrtcGetCUBINSize: fn(nvrtcProgram, *mut usize) -> u32;
    nvrtcGetCUBIN: fn(nvrtcProgram, *mut c_char) -> u32;
}

/// NVRTC, probed once per process by [`nvrtc`].
pub struct Nvrtc {
    fns: Fns,
    /// (major, minor), for example (12, 9).
    version: (i32, i32),
    /// The real architectures it can build cubins for, as numbers (86 for sm_86).
    archs: Vec<i32>,
    /// Where the library was loaded from, when the loader says.
    path: Option<PathBuf>,
}

fn unavailable(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::Unsupported, msg)
}

/// The directories searched after the loader's search path: `$CUDA_PATH/lib64`,
/// `$CUDA_HOME/lib64`, then `/usr/local/cuda/lib64`.
pub(super) fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["CUDA_PATH", "CUDA_HOME"]
        .iter()
        .filter_map(std::env::var_os)
        .filter(|v| !v.is_empty())
        .map(|v| Path::new(&v).join("lib64"))
        .collect();
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.dedup();
    dirs
}

/// NVRTC, probed on first use and cached for the process (the failure too). A
/// missing library or symbol is [`ErrorCode::Unsupported`], with a message naming
/// the library and where it was looked for.
pub fn nvrtc() -> Result<&'static Nvrtc> {
    static NVRTC: OnceLock<Result<Nvrtc, Error>> = OnceLock::new();
    NVRTC
        .get_or_init(|| {
            // Backstop only: after the presence check nothing in probe() can panic.
            catch_unwind(probe).unwrap_or_else(|_| Err(unavailable("loading NVRTC failed")))
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn probe() -> Result<Nvrtc> {
    let fns = open()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: writes two ints.
    let res = unsafe { (fns.nvrtcVersion)(&mut major, &mut minor) };
    if res != NVRTC_SUCCESS {
        return Err(unavailable(format!(
            "nvrtcVersion failed (nvrtcResult {res})"
        )));
    }
    let mut n: c_int = 0;
    // SAFETY: writes one int.
    let res = unsafe { (fns.nvrtcGetNumSupportedArchs)(&mut n) };
    let mut archs = vec![0 as c_int; usize::try_from(n).unwrap_or(0)];
    if res == NVRTC_SUCCESS && !archs.is_empty() {
        // SAFETY: writes n ints into a buffer of n.
        let res = unsafe { (fns.nvrtcGetSupportedArchs)(archs.as_mut_ptr()) };
        if res != NVRTC_SUCCESS {
            archs.clear();
        }
    }
    archs.sort_unstable();
    let path = library_path(fns.nvrtcVersion as *const c_void);
    if let Some(dir) = path.as_deref().and_then(Path::parent) {
        preload_builtins(dir, (major, minor));
    }
    Ok(Nvrtc {
        fns,
        version: (major, minor),
        archs,
        path,
    })
}

/// Opens libnvrtc: cudarc's names first, then ours (see the module docs).
fn open() -> Result<Fns> {
    // SAFETY: only tries to open and close the candidate library names.
    if unsafe { nsys::is_culib_present() } {
        // SAFETY: the library was just found, so culib() opens it instead of panicking.
        let lib = unsafe { nsys::culib() };
        // SAFETY: a dlsym lookup; culib() keeps the library loaded for the process.
        return Fns::load(&|name| unsafe { lib.get::<*const c_void>(name) }.map_or(null(), |s| *s));
    }
    let mut tried: Vec<String> = EXTRA_NAMES.iter().map(|n| n.to_string()).collect();
    for dir in search_dirs() {
        tried.extend(DIR_NAMES.iter().map(|n| dir.join(n).display().to_string()));
    }
    for name in &tried {
        let Ok(c) = CString::new(name.as_str()) else {
            continue;
        };
        // SAFETY: dlopen of a NUL-terminated name; the handle is kept for the process.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !h.is_null() {
            // SAFETY: a dlsym lookup in a library that stays loaded.
            return Fns::load(&|sym| unsafe { libc::dlsym(h, sym.as_ptr().cast()) }.cast_const());
        }
    }
    Err(unavailable(format!(
        "NVRTC (the CUDA runtime compiler, libnvrtc.so) not found: looked for libnvrtc.so, \
         libnvrtc.so.13 and libnvrtc.so.12 on the library search path (LD_LIBRARY_PATH), \
         then in {}; install the CUDA toolkit's NVRTC (cuda-nvrtc), or set CUDA_PATH or \
         LD_LIBRARY_PATH to its directory",
        search_dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// The file a loaded symbol comes from, if the loader gives an absolute path.
fn library_path(sym: *const c_void) -> Option<PathBuf> {
    // SAFETY: Dl_info is plain data; dladdr fills it or returns 0.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: sym is an address inside a loaded library.
    if unsafe { libc::dladdr(sym, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr gives a NUL-terminated name owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let p = PathBuf::from(OsStr::from_bytes(name.to_bytes()));
    p.is_absolute().then_some(p)
}

/// The builtins library's file name for an NVRTC version.
fn builtins_name((major, minor): (i32, i32)) -> String {
    format!("libnvrtc-builtins.so.{major}.{minor}")
}

/// Opens `libnvrtc-builtins.so.MAJOR.MINOR` from `dir` if it is there, so that
/// NVRTC's own dlopen of that name finds it loaded (the loader matches the soname).
fn preload_builtins(dir: &Path, version: (i32, i32)) {
    let p = dir.join(builtins_name(version));
    if !p.exists() {
        return;
    }
    if let Ok(c) = CString::new(p.as_os_str().as_bytes()) {
        // SAFETY: dlopen of an existing file; the handle is kept for the process.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            crate::log::warn(|| format!("could not open {}", p.display()));
        }
    }
}

/// The target architecture named by the options (`--gpu-architecture=X`, `-arch=X`,
/// or either flag followed by `X`), the last one if several.
pub(super) fn named_target(options: &[String]) -> Option<String> {
    let mut found = None;
    let mut it = options.iter();
    while let Some(o) = it.next() {
        for flag in ["--gpu-architecture", "-arch"] {
            if let Some(rest) = o.strip_prefix(flag) {
                if let Some(v) = rest.strip_prefix('=') {
                    found = Some(v.to_string());
                } else if rest.is_empty() {
                    found = it.next().cloned();
                }
            }
        }
    }
    found
}

/// Decides the target and whether the output is a cubin. Named in the options: as
/// named (`sm_*` gives a cubin, anything else PTX). Otherwise the device's own
/// `sm_XY` when NVRTC supports it (a cubin), else the newest `compute_XY` NVRTC
/// supports below the device (PTX, which the driver compiles for the device).
/// Returns (the option to add, target, cubin).
pub(super) fn choose_target(
    options: &[String],
    cc: (i32, i32),
    archs: &[i32],
    version: (i32, i32),
) -> Result<(Option<String>, String, bool)> {
    if let Some(t) = named_target(options) {
        let cubin = t.starts_with("sm_");
        return Ok((None, t, cubin));
    }
    let dev = cc.0 * 10 + cc.1;
    let (target, cubin) = if archs.contains(&dev) {
        (format!("sm_{dev}"), true)
    } else if let Some(&best) = archs.iter().filter(|&&a| a < dev).max() {
        (format!("compute_{best}"), false)
    } else {
        return Err(Error::new(
            ErrorCode::Unsupported,
            format!(
                "NVRTC {}.{} cannot compile for this device (compute capability {}.{}); \
                 it supports {}",
                version.0,
                version.1,
                cc.0,
                cc.1,
                if archs.is_empty() {
                    "no architecture it would name".to_string()
                } else {
                    archs
                        .iter()
                        .map(|a| format!("sm_{a}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
        ));
    };
    Ok((Some(format!("--gpu-architecture={target}")), target, cubin))
}

impl CudaDevice {
    /// [`crate::backend::ModuleApi::compile_plan`] on NVRTC.
    pub(super) fn nvrtc_plan(&self, options: &[String]) -> Result<CompilePlan> {
        let nv = nvrtc()?;
        let cc = self.compute_capability()?;
        let (extra, target, cubin) = choose_target(options, cc, &nv.archs, nv.version)?;
        let mut options = options.to_vec();
        options.extend(extra);
        Ok(CompilePlan {
            options,
            target,
            cubin,
            compiler: format!("NVRTC {}.{}", nv.version.0, nv.version.1),
            driver_version: self.drv.version(),
        })
    }
}

/// A program, destroyed on drop.
struct Program<'a> {
    nv: &'a Nvrtc,
    prog: nvrtcProgram,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: a live program, destroyed once.
        let _ = unsafe { (self.nv.fns.nvrtcDestroyProgram)(&mut self.prog) };
    }
}

type SizeFn = unsafe extern "C" fn(nvrtcProgram, *mut usize) -> u32;
type GetFn = unsafe extern "C" fn(nvrtcProgram, *mut c_char) -> u32;

impl Program<'_> {
    /// Reads one of the program's outputs (its log, PTX or cubin) through its size
    /// and copy functions.
    fn read(&self, size: SizeFn, get: GetFn, what: &str) -> Result<Vec<u8>> {
        let mut n = 0usize;
        // SAFETY: a live program; writes one size.
        self.nv.check(unsafe { size(self.prog, &mut n) }, what)?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            // SAFETY: NVRTC writes exactly the n bytes it reported.
            self.nv
                .check(unsafe { get(self.prog, buf.as_mut_ptr().cast()) }, what)?;
        }
        Ok(buf)
    }

    fn log(&self) -> String {
        let f = &self.nv.fns;
        self.read(
            f.nvrtcGetProgramLogSize,
            f.nvrtcGetProgramLog,
            "nvrtcGetProgramLog",
        )
        .map(|b| log_text(&b))
        .unwrap_or_default()
    }
}

impl Nvrtc {
    /// The name NVRTC gives a result code.
    fn error_name(&self, res: u32) -> String {
        // SAFETY: returns a static string (or NULL for unknown codes in old versions).
        let p = unsafe { (self.fns.nvrtcGetErrorString)(res) };
        if p.is_null() {
            return format!("NVRTC error {res}");
        }
        // SAFETY: a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn check(&self, res: u32, what: &str) -> Result<()> {
        if res == NVRTC_SUCCESS {
            return Ok(());
        }
        let code = if res == NVRTC_ERROR_OUT_OF_MEMORY {
            ErrorCode::OutOfMemory
        } else {
            ErrorCode::Compile
        };
        Err(Error::new(
            code,
            format!("{what}: {} ({res})", self.error_name(res)),
        ))
    }

    /// Compiles `source` as `plan` says and returns the cubin or the PTX (with its NUL).
    pub(super) fn compile(
        &self,
        source: &CStr,
        name: &CStr,
        headers: &[BuiltinHeader],
        plan: &CompilePlan,
    ) -> Result<Vec<u8>> {
        let texts: Vec<*const c_char> = headers.iter().map(|h| h.text.as_ptr()).collect();
        let names: Vec<*const c_char> = headers.iter().map(|h| h.name.as_ptr()).collect();
        let opts = plan
            .options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Error::invalid_argument("a compile option contains a NUL byte"))?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let count = |n: usize| {
            c_int::try_from(n).map_err(|_| Error::out_of_range("too many headers or options"))
        };
        let mut prog: nvrtcProgram = null_mut();
        // SAFETY: every string is NUL-terminated and outlives the call; the arrays hold
        // `headers.len()` entries each.
        let res = unsafe {
            (self.fns.nvrtcCreateProgram)(
                &mut prog,
                source.as_ptr(),
                name.as_ptr(),
                count(headers.len())?,
                texts.as_ptr(),
                names.as_ptr(),
            )
        };
        self.check(res, "nvrtcCreateProgram")?;
        let prog = Program { nv: self, prog };
        // SAFETY: a live program; the options outlive the call.
        let res = unsafe {
            (self.fns.nvrtcCompileProgram)(prog.prog, count(opt_ptrs.len())?, opt_ptrs.as_ptr())
        };
        let log = prog.log();
        if res != NVRTC_SUCCESS {
            return Err(self.compile_error(res, name, plan, &log));
        }
        if !log.is_empty() {
            crate::log::warn(|| format!("compiling {}: {log}", name.to_string_lossy()));
        }
        let f = &self.fns;
        if plan.cubin {
            prog.read(f.nvrtcGetCUBINSize, f.nvrtcGetCUBIN, "nvrtcGetCUBIN")
        } else {
            prog.read(f.nvrtcGetPTXSize, f.nvrtcGetPTX, "nvrtcGetPTX")
        }
    }

    fn compile_error(&self, res: u32, name: &CStr, plan: &CompilePlan, log: &str) -> Error {
        let mut msg = format!(
            "compiling '{}' with {} for {} failed: {} ({res})",
            name.to_string_lossy(),
            plan.compiler,
            plan.target,
            self.error_name(res)
        );
        if res == NVRTC_ERROR_BUILTIN_OPERATION_FAILURE {
            let beside = match self.path.as_deref().and_then(Path::parent) {
                Some(d) => format!("put it in {} or on LD_LIBRARY_PATH", d.display()),
                None => "put it beside libnvrtc or on LD_LIBRARY_PATH".to_string(),
            };
            msg.push_str(&format!(
                "; NVRTC could not use its builtins library {}: {beside}",
                builtins_name(self.version)
            ));
        }
        if !log.is_empty() {
            let mut end = log.len().min(MAX_LOG_BYTES);
            while !log.is_char_boundary(end) {
                end -= 1;
            }
            msg.push_str("\ncompile log:\n");
            msg.push_str(&log[..end]);
            if end < log.len() {
                msg.push_str("\n... (log truncated)");
            }
        }
        let code = if res == NVRTC_ERROR_OUT_OF_MEMORY {
            ErrorCode::OutOfMemory
        } else {
            ErrorCode::Compile
        };
        Error::new(code, msg)
    }
}

#[cfg(test)]
mod tests {
    use super::super::expect_err;
    use super::*;

    fn opts(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn symbols_are_unique() {
        let mut names = Fns::SYMBOLS.to_vec();
        assert!(names.iter().all(|n| n.starts_with("nvrtc")));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Fns::SYMBOLS.len());
    }

    #[test]
    fn named_target_forms() {
        assert_eq!(named_target(&opts(&["-O3"])), None);
        assert_eq!(
            named_target(&opts(&["--gpu-architecture=sm_80"])).as_deref(),
            Some("sm_80")
        );
        assert_eq!(
            named_target(&opts(&["-arch=compute_90", "-lineinfo"])).as_deref(),
            Some("compute_90")
        );
        assert_eq!(
            named_target(&opts(&["-arch", "sm_75"])).as_deref(),
            Some("sm_75")
        );
        assert_eq!(
            named_target(&opts(&["-arch=sm_70", "--gpu-architecture=sm_90a"])).as_deref(),
            Some("sm_90a")
        );
    }

    #[test]
    fn target_defaults_to_the_device() {
        let archs = [75, 80, 86, 89, 90];
        let v = (12, 4);
        let (opt, t, cubin) = choose_target(&[], (8, 6), &archs, v).expect("plan");
        assert_eq!(
            (opt.as_deref(), t.as_str(), cubin),
            (Some("--gpu-architecture=sm_86"), "sm_86", true)
        );
        // A device newer than NVRTC: PTX for the newest older virtual architecture.
        let (opt, t, cubin) = choose_target(&[], (12, 0), &archs, v).expect("plan");
        assert_eq!(
            (opt.as_deref(), t.as_str(), cubin),
            (Some("--gpu-architecture=compute_90"), "compute_90", false)
        );
        // The options win.
        let o = opts(&["-arch=compute_80"]);
        let (opt, t, cubin) = choose_target(&o, (8, 6), &archs, v).expect("plan");
        assert_eq!((opt, t.as_str(), cubin), (None, "compute_80", false));
        // A device older than all NVRTC supports.
        let e = expect_err(choose_target(&[], (5, 0), &archs, v));
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("sm_75"), "{}", e.message);
    }

    #[test]
    fn search_dirs_end_with_the_default_toolkit() {
        let d = search_dirs();
        assert_eq!(
            d.last().map(|p| p.as_path()),
            Some(Path::new("/usr/local/cuda/lib64"))
        );
        assert_eq!(builtins_name((12, 9)), "libnvrtc-builtins.so.12.9");
    }

    /// Runs where NVRTC is installed (it needs no GPU): PTX and a cubin, the built-in
    /// header, and a syntax error's log.
    #[test]
    fn compiles_where_nvrtc_is_present() {
        let Ok(nv) = nvrtc() else {
            return;
        };
        let headers = crate::compile::BUILTIN_HEADERS;
        let src = c"#include <sluice/rng.cuh>
            extern \"C\" __global__ void k(unsigned* o) {
                sluice_rng_state s; sluice_rng_init(1, threadIdx.x, 0, &s); o[threadIdx.x] = sluice_rng_next(&s);
            }";
        let plan = |target: &str, cubin: bool| CompilePlan {
            options: vec![format!("--gpu-architecture={target}")],
            target: target.to_string(),
            cubin,
            compiler: String::new(),
            driver_version: 0,
        };
        let oldest = *nv.archs.first().expect("NVRTC names its architectures");
        let ptx = nv
            .compile(
                src,
                c"k.cu",
                headers,
                &plan(&format!("compute_{oldest}"), false),
            )
            .expect("PTX");
        let text = String::from_utf8_lossy(&ptx);
        assert!(text.contains(".entry k"), "{text}");
        assert_eq!(ptx.last(), Some(&0), "PTX keeps its NUL");
        let cubin = nv
            .compile(src, c"k.cu", headers, &plan(&format!("sm_{oldest}"), true))
            .expect("cubin");
        assert!(cubin.starts_with(b"\x7fELF"));
        let e = expect_err(nv.compile(
            c"extern \"C\" __global__ void k() { int x = }",
            c"bad.cu",
            headers,
            &plan(&format!("sm_{oldest}"), true),
        ));
        assert_eq!(e.code, ErrorCode::Compile);
        assert!(e.message.contains("bad.cu("), "{}", e.message);
        let e = expect_err(nv.compile(src, c"k.cu", &[], &plan(&format!("sm_{oldest}"), true)));
        assert!(e.message.contains("sluice/rng.cuh"), "{}", e.message);
        let mut bad = plan(&format!("sm_{oldest}"), true);
        bad.options.push("--no-such-option".into());
        let e = expect_err(nv.compile(src, c"k.cu", headers, &bad));
        assert_eq!(e.code, ErrorCode::Compile, "{e:?}");
    }

    #[test]
    fn no_nvrtc_is_a_clean_cached_error() {
        let first = match nvrtc() {
            Ok(_) => return, // a machine with NVRTC: covered by tests/module_compile.rs
            Err(e) => e,
        };
        assert_eq!(first.code, ErrorCode::Unsupported);
        assert!(first.message.contains("libnvrtc"), "{}", first.message);
        assert_eq!(first, expect_err(nvrtc()));
    }
}

//! Gives the cdylib the SONAME `libsluice.so.<MAJOR>` (`libsluice.so.0`), the same
//! as the CMake install's, so a binary names the same library however it was built.
//!
//! A binary linked against `target/<profile>/libsluice.so` then records
//! `libsluice.so.0` (DT_NEEDED) and needs that name beside the library at run time.
//! Cargo cannot make the link after it links, so this script makes it first: a
//! symlink `libsluice.so.0 -> libsluice.so` in the profile directory, dangling until
//! cargo writes the library (which it does after this script). Scripts that copy
//! the library elsewhere make the same link there (`docs/decisions.md`).

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    let soname = format!("libsluice.so.{major}");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os != "linux" {
        return;
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    // OUT_DIR is <target>/<profile>/build/sluice-cdylib-<hash>/out: the library lands in
    // <target>/<profile>.
    if let Some(dir) = std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .and_then(|p| p.ancestors().nth(3).map(Path::to_path_buf))
    {
        let link = dir.join(&soname);
        if std::fs::read_link(&link).ok().as_deref() != Some(Path::new("libsluice.so")) {
            let _ = std::fs::remove_file(&link);
            #[cfg(unix)]
            if let Err(e) = std::os::unix::fs::symlink("libsluice.so", &link) {
                println!("cargo:warning=could not link {}: {e}", link.display());
            }
        }
    }
}

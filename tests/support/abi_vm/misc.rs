//! The ABI VM's ops: logs, the engine mode, traces, the rest, and the deprecated 0.1.0 names.

use super::*;

impl Vm {
    pub(super) fn op_log(&mut self, s: &mut Src) {
        if s.bool() {
            let lvl = if s.likely() {
                (s.u8() % 5) as u32
            } else {
                s.u32()
            };
            self.chk("log_set_level", sluice_log_set_level(lvl));
        } else {
            // NULL would log to stderr; keep a callback (the same one) instead.
            self.chk(
                "log_set_callback",
                sluice_log_set_callback(Some(log_cb), s.u64() as *mut c_void),
            );
        }
    }

    pub(super) fn op_engine(&mut self, s: &mut Src) {
        let m = if s.likely() {
            (s.u8() % 2) as u32
        } else {
            s.u32()
        };
        self.chk("engine_set_mode", sluice_engine_set_mode(m));
        assert!(sluice_engine_mode() <= 1);
    }

    pub(super) fn op_trace(&mut self, s: &mut Src) {
        match s.u8() % 4 {
            0 => {
                let path = match s.u8() % 4 {
                    0 => None,
                    1 => Some(std::ffi::CString::new("/nonexistent-dir/t.json").unwrap()),
                    _ => Some(
                        std::ffi::CString::new(
                            self.tmp.join("trace.json").to_string_lossy().as_bytes(),
                        )
                        .unwrap(),
                    ),
                };
                let p = path.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
                self.chk("trace_start", sluice_trace_start(p));
            }
            1 => {
                self.chk("trace_flush", sluice_trace_flush());
            }
            _ => {
                self.chk("trace_stop", sluice_trace_stop());
            }
        }
    }

    pub(super) fn op_misc(&mut self, s: &mut Src) {
        let code = s.u32() % 30;
        // SAFETY: static NUL-terminated strings.
        let name = unsafe { CStr::from_ptr(sluice_error_code_name(code)) };
        assert!(!name.to_bytes().is_empty());
        assert_eq!(sluice_error_code(std::ptr::null()), 0);
        assert_eq!(sluice_error_driver_code(std::ptr::null()), 0);
        // SAFETY: "" for NULL.
        assert!(
            unsafe { CStr::from_ptr(sluice_error_message(std::ptr::null())) }
                .to_bytes()
                .is_empty()
        );
        sluice_error_free(std::ptr::null_mut());
        // SAFETY: static.
        let v = unsafe { CStr::from_ptr(sluice_version()) };
        assert_eq!(v.to_bytes(), b"0.1.1");
        assert_eq!(sluice_abi_version(), SLUICE_ABI_VERSION);
        let _ = sluice_live_handles();
    }

    #[allow(deprecated)]
    pub(super) fn op_deprecated(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let (d, x) = (self.pick(s, K::Buffer), self.pick(s, K::Buffer));
        let n = self.size_of(d);
        let off = self.within(s, n);
        let len = self.within(s, n);
        match s.u8() % 9 {
            0 => {
                self.chk("copy", sluice_copy(st(b), bu(d), off, bu(x), 0, len));
            }
            1 => {
                let (p, l) = self.host_range(s, len);
                self.chk(
                    "copy_from_host",
                    sluice_copy_from_host(st(b), bu(d), off, p as *const c_void, l),
                );
            }
            2 => {
                let (p, l) = self.host_range(s, len);
                self.chk(
                    "copy_to_host",
                    sluice_copy_to_host(st(b), p as *mut c_void, bu(d), off, l),
                );
            }
            3 => {
                self.chk("memset", sluice_memset(st(b), bu(d), off, 1, len));
            }
            4 => {
                let mut y = sy(0);
                if self.chk("sync_new", sluice_sync_new(&mut y)) == 0 {
                    self.add(K::Sync, y.bits);
                }
            }
            5 => {
                let dd = self.pick(s, K::Device);
                let mut c = gc(0);
                if self.chk("graph_cache_new", sluice_graph_cache_new(dev(dd), &mut c)) == 0 {
                    self.add(K::Cache, c.bits);
                }
            }
            6 => {
                let on = s.likely();
                self.chk("graphs_set_enabled", sluice_graphs_set_enabled(on));
            }
            7 => {
                let m = self.pick(s, K::Module);
                let mut f = fu(0);
                if self.chk(
                    "module_function",
                    sluice_module_function(mo(m), c"k".as_ptr(), &mut f),
                ) == 0
                {
                    self.add(K::Function, f.bits);
                }
            }
            _ => {
                let dims = sluice_launch_dims_t {
                    grid: [1, 1, 1],
                    block: [1, 1, 1],
                    shared_mem_bytes: 0,
                };
                let f = self.pick(s, K::Function);
                self.chk(
                    "launch",
                    sluice_launch(
                        st(b),
                        fu(f),
                        &dims,
                        std::ptr::null_mut(),
                        0,
                        std::ptr::null(),
                        0,
                        std::ptr::null(),
                        0,
                    ),
                );
                let ud = Box::into_raw(Box::new(0i32)) as *mut c_void;
                CB_MADE.fetch_add(1, SeqCst);
                self.chk(
                    "stream_host_callback",
                    sluice_stream_host_callback(
                        st(b),
                        Some(host_cb),
                        ud,
                        Some(host_free),
                        std::ptr::null(),
                        0,
                        std::ptr::null(),
                        0,
                    ),
                );
            }
        }
    }
}

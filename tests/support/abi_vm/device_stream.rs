//! The ABI VM's ops: devices, the pinned pool, streams, events, graphs, the graph cache and counters.

use super::*;

impl Vm {
    pub(super) fn op_device_open(&mut self, s: &mut Src) {
        let backend = match s.u8() % 4 {
            0 => SLUICE_BACKEND_CUDA,
            1 => s.u32(),
            _ => SLUICE_BACKEND_HOST,
        };
        let ordinal = if s.likely() {
            0
        } else {
            s.u32() % 4 + (s.u8() as u32) * 7
        };
        let mut d = dev(0);
        let p = Self::out(s, &mut d);
        if self.chk("device_open", sluice_device_open(backend, ordinal, p)) == 0 {
            self.add(K::Device, d.bits);
        }
    }

    pub(super) fn op_device_query(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        match s.u8() % 3 {
            0 => {
                let mut p: sluice_device_props_t = zeroed();
                let o = Self::out(s, &mut p);
                if self.chk("device_props", sluice_device_props(dev(d), o)) == 0 {
                    assert!(p.name.contains(&0), "device name not NUL-terminated");
                }
            }
            1 => {
                let (mut a, mut b) = (0i32, 0i32);
                let (pa, pb) = (Self::out(s, &mut a), Self::out(s, &mut b));
                self.chk(
                    "device_priority_range",
                    sluice_device_priority_range(dev(d), pa, pb),
                );
            }
            _ => {
                let mut n = 0u32;
                let backend = if s.likely() {
                    (s.u8() % 3) as u32
                } else {
                    s.u32()
                };
                let p = Self::out(s, &mut n);
                self.chk("device_count", sluice_device_count(backend, p));
            }
        }
    }

    pub(super) fn op_pinned(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        match s.u8() % 3 {
            0 => {
                let mut p: sluice_pinned_stats_t = zeroed();
                let o = Self::out(s, &mut p);
                self.chk("device_pinned_stats", sluice_device_pinned_stats(dev(d), o));
            }
            1 => {
                self.chk("device_pinned_trim", sluice_device_pinned_trim(dev(d)));
            }
            _ => {
                let n = self.size(s) as u64;
                self.chk(
                    "device_pinned_set_limit",
                    sluice_device_pinned_set_limit(dev(d), n),
                );
            }
        }
    }

    pub(super) fn op_stream_create(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let flags = if s.likely() {
            (s.u8() % 2) as u32
        } else {
            s.u32()
        };
        let prio = if s.likely() {
            (s.u8() % 5) as i32 - 2
        } else {
            s.u32() as i32
        };
        let mut b = st(0);
        let p = Self::out(s, &mut b);
        if self.chk(
            "stream_create",
            sluice_stream_create(dev(d), flags, prio, p),
        ) == 0
        {
            self.add(K::Stream, b.bits);
        }
    }

    pub(super) fn op_stream_wrap(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let raw: *mut c_void = match s.u8() % 4 {
            0 => std::ptr::null_mut(),
            1 => s.u64() as *mut c_void,
            _ => {
                let b = self.pick(s, K::Stream);
                let mut r: *mut c_void = std::ptr::null_mut();
                if self.chk("stream_raw", sluice_stream_raw(st(b), &mut r)) == 0 {
                    r
                } else {
                    std::ptr::null_mut()
                }
            }
        };
        let mut b = st(0);
        let p = Self::out(s, &mut b);
        if self.chk(
            "stream_wrap_external",
            sluice_stream_wrap_external(dev(d), raw, p),
        ) == 0
        {
            self.add(K::Stream, b.bits);
        }
    }

    pub(super) fn op_stream_query(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        match s.u8() % 6 {
            0 => {
                let mut idle = false;
                let p = Self::out(s, &mut idle);
                self.chk("stream_query", sluice_stream_query(st(b), p));
            }
            1 => {
                self.chk("stream_synchronize", sluice_stream_synchronize(st(b)));
            }
            2 => {
                let label = match s.u8() % 3 {
                    0 => None,
                    _ => Some(std::ffi::CString::new(format!("l{}", s.u16())).unwrap()),
                };
                let p = label.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
                self.chk("stream_set_label", sluice_stream_set_label(st(b), p));
            }
            3 => {
                let mut x: sluice_stream_stats_t = zeroed();
                let p = Self::out(s, &mut x);
                self.chk("stream_stats", sluice_stream_stats(st(b), p));
            }
            4 => {
                let mut r: *mut c_void = std::ptr::null_mut();
                let p = Self::out(s, &mut r);
                self.chk("stream_raw", sluice_stream_raw(st(b), p));
            }
            _ => {
                let mut c = false;
                let p = Self::out(s, &mut c);
                if self.chk("stream_is_capturing", sluice_stream_is_capturing(st(b), p)) == 0
                    && c
                    && !self.capturing.contains(&b)
                {
                    // A joined fork reports capturing too; nothing to end for it.
                }
            }
        }
    }

    pub(super) fn op_event_record(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let flags = if s.likely() {
            (s.u8() % 2) as u32
        } else {
            s.u32()
        };
        let mut e = ev(0);
        let p = Self::out(s, &mut e);
        if self.chk("event_record", sluice_event_record(st(b), flags, p)) == 0 {
            self.add(K::Event, e.bits);
        }
    }

    pub(super) fn op_event_query(&mut self, s: &mut Src) {
        let e = self.pick(s, K::Event);
        match s.u8() % 4 {
            0 => {
                let mut done = false;
                let p = Self::out(s, &mut done);
                self.chk("event_query", sluice_event_query(ev(e), p));
            }
            1 => {
                self.chk("event_synchronize", sluice_event_synchronize(ev(e)));
            }
            2 => {
                let f = self.pick(s, K::Event);
                let mut ms = 0f32;
                let p = Self::out(s, &mut ms);
                self.chk("event_elapsed_ms", sluice_event_elapsed_ms(ev(e), ev(f), p));
            }
            _ => {
                let (mut a, mut b) = (0u64, 0u64);
                let (pa, pb) = (Self::out(s, &mut a), Self::out(s, &mut b));
                self.chk("event_sequence", sluice_event_sequence(ev(e), pa, pb));
            }
        }
    }

    pub(super) fn end_capture(&mut self, s: &mut Src, b: u64) {
        let mut g = gr(0);
        let p = Self::out(s, &mut g);
        let c = self.chk("graph_capture_end", sluice_graph_capture_end(st(b), p));
        if c == 0 {
            self.add(K::Graph, g.bits);
        }
        // Ended on success and on failure alike (unless the call never reached it).
        if c == 0 || (c != SLUICE_ERROR_NULL_ARGUMENT && c != SLUICE_ERROR_INVALID_HANDLE) {
            self.capturing.retain(|&x| x != b);
        }
    }

    pub(super) fn op_graph_query(&mut self, s: &mut Src) {
        let g = self.pick(s, K::Graph);
        if s.bool() {
            let mut n = 0usize;
            let p = Self::out(s, &mut n);
            self.chk("graph_node_count", sluice_graph_node_count(gr(g), p));
        } else {
            let path = match s.u8() % 4 {
                0 => None,
                1 => Some(std::ffi::CString::new("/nonexistent-dir/x.dot").unwrap()),
                _ => Some(
                    std::ffi::CString::new(self.tmp.join("g.dot").to_string_lossy().as_bytes())
                        .unwrap(),
                ),
            };
            let p = path.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
            let verbose = s.bool();
            self.chk("graph_debug_dot", sluice_graph_debug_dot(gr(g), p, verbose));
        }
    }

    pub(super) fn op_cache_run(&mut self, s: &mut Src) {
        let c = self.pick(s, K::Cache);
        let key = (s.u8() % 4) as u64;
        let b = self.pick(s, K::Stream);
        let buf = self.pick(s, K::Buffer);
        let size = self.size_of(buf);
        let mut body = Body {
            buffer: buf,
            offset: self.within(s, size),
            len: self.within(s, size),
            rc: if s.u8() % 8 == 0 { 3 } else { 0 },
            ops: s.u8(),
        };
        let f: sluice_graph_body_fn = if s.u8() % 16 == 0 {
            None
        } else {
            Some(body_fn)
        };
        let ud = &mut body as *mut Body as *mut c_void;
        self.chk(
            "graph_cache_run",
            sluice_graph_cache_run(gc(c), key, st(b), f, ud),
        );
        assert_eq!(BAD.load(SeqCst), 0, "graph cache body saw a bad error");
    }

    pub(super) fn op_cache_misc(&mut self, s: &mut Src) {
        match s.u8() % 4 {
            0 => {
                let c = self.pick(s, K::Cache);
                let mut x: sluice_graph_cache_stats_t = zeroed();
                let p = Self::out(s, &mut x);
                if self.chk("graph_cache_stats", sluice_graph_cache_stats(gc(c), p)) == 0 {
                    assert!(x.entries <= 4, "more entries than keys used: {}", x.entries);
                }
            }
            1 => {
                let c = self.pick(s, K::Cache);
                let n = if s.likely() {
                    (s.u8() % 4) as usize
                } else {
                    s.u64() as usize
                };
                self.chk(
                    "graph_cache_set_max_entries",
                    sluice_graph_cache_set_max_entries(gc(c), n),
                );
            }
            2 => {
                let c = self.pick(s, K::Cache);
                let key = (s.u8() % 6) as u64;
                let mut x = false;
                let p = Self::out(s, &mut x);
                self.chk(
                    "graph_cache_contains",
                    sluice_graph_cache_contains(gc(c), key, p),
                );
            }
            _ => {
                let on = s.likely();
                self.chk(
                    "graph_cache_set_enabled",
                    sluice_graph_cache_set_enabled(on),
                );
            }
        }
    }

    pub(super) fn op_counters(&mut self, s: &mut Src) {
        if s.bool() {
            let d = if s.bool() { 0 } else { self.pick(s, K::Device) };
            let mut c: sluice_counters_t = zeroed();
            let p = Self::out(s, &mut c);
            self.chk("counters", sluice_counters(dev(d), p));
        } else {
            let on = s.bool();
            self.chk("counters_set_enabled", sluice_counters_set_enabled(on));
        }
    }
}

//! The ABI VM's ops: buffers of every kind, copies, memsets, sync objects, foreign ops and host callbacks.

use super::*;

impl Vm {
    pub(super) fn new_buffer(&mut self, bits: u64, size: usize) {
        self.add(K::Buffer, bits);
        self.sizes.push((bits, size));
    }

    pub(super) fn op_buffer_alloc(&mut self, s: &mut Src) {
        let n = self.alloc_size(s);
        let mut b = bu(0);
        let pinned = s.u8() % 3 == 0;
        let p = Self::out(s, &mut b);
        let c = if pinned {
            let d = self.pick(s, K::Device);
            self.chk(
                "buffer_alloc_pinned",
                sluice_buffer_alloc_pinned(dev(d), n, p),
            )
        } else {
            let st_ = self.pick(s, K::Stream);
            self.chk("buffer_alloc", sluice_buffer_alloc(st(st_), n, p))
        };
        if c == 0 {
            self.new_buffer(b.bits, n);
        } else if n >= HUGE && !p.is_null() {
            // A huge request fails cleanly, never aborts.
            assert!(
                [
                    SLUICE_ERROR_OUT_OF_MEMORY,
                    SLUICE_ERROR_OUT_OF_RANGE,
                    SLUICE_ERROR_INVALID_HANDLE,
                    SLUICE_ERROR_CAPTURE_UNSUPPORTED,
                    SLUICE_ERROR_INVALID_ARGUMENT,
                    SLUICE_ERROR_WRONG_DEVICE,
                ]
                .contains(&c),
                "alloc of {n} bytes gave {c}"
            );
        }
    }

    pub(super) fn op_register_host(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let n = (s.u16() as usize).max(s.u8() as usize % 2);
        let mut mem = vec![0u8; n.max(1)];
        let (ptr, len) = match s.u8() % 8 {
            0 => (std::ptr::null_mut(), n),
            1 => (mem.as_mut_ptr(), 0),
            2 => (mem.as_mut_ptr(), usize::MAX),
            _ => (mem.as_mut_ptr(), n.max(1)),
        };
        let mut b = bu(0);
        let p = Self::out(s, &mut b);
        if self.chk(
            "buffer_register_host",
            sluice_buffer_register_host(dev(d), ptr as *mut c_void, len, p),
        ) == 0
        {
            self.new_buffer(b.bits, len);
        }
        // Kept to the end of the run: graphs may still use it after the free.
        self.host_mem.push(mem);
    }

    pub(super) fn op_wrap_device(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let n = 1 + s.u16() as usize;
        let mem = Box::new(vec![0u8; n]);
        let addr = mem.as_ptr() as u64;
        let (ptr, len) = match s.u8() % 8 {
            0 => (0, n),
            1 => (addr, 0),
            2 => (addr, usize::MAX - s.u8() as usize),
            _ => (addr, 1 + s.u32() as usize % n),
        };
        let with_release = s.likely();
        if !with_release {
            // Nobody can tell when sluice is done with it: wrap process-static memory.
            static MEM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
            let base = *MEM
                .get_or_init(|| Box::leak(vec![0u8; 1 << 16].into_boxed_slice()).as_ptr() as usize);
            let len = if len == n { 1 + len % (1 << 16) } else { len };
            let ptr = if ptr == 0 { 0 } else { base as u64 };
            let mut b = bu(0);
            let p = Self::out(s, &mut b);
            let c = self.chk(
                "buffer_wrap_device",
                sluice_buffer_wrap_device(dev(d), ptr, len, None, std::ptr::null_mut(), p),
            );
            if c == 0 {
                self.new_buffer(b.bits, len);
            }
            return;
        }
        let ud = Box::into_raw(mem) as *mut c_void;
        let mut b = bu(0);
        let p = Self::out(s, &mut b);
        let rel: sluice_release_fn = Some(release_fn);
        let c = self.chk(
            "buffer_wrap_device",
            sluice_buffer_wrap_device(dev(d), ptr, len, rel, ud, p),
        );
        if c == 0 {
            self.new_buffer(b.bits, len);
            REL_MADE.fetch_add(1, SeqCst);
            return;
        }
        // On error the caller still owns the memory.
        // SAFETY: ud is the box made above, not released on error by contract.
        drop(unsafe { Box::from_raw(ud as *mut Vec<u8>) });
    }

    pub(super) fn op_buffer_query(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Buffer);
        if s.bool() {
            let mut i: sluice_buffer_info_t = zeroed();
            let p = Self::out(s, &mut i);
            if self.chk("buffer_info", sluice_buffer_info(bu(b), p)) == 0
                && self.is_live(K::Buffer, b)
            {
                assert!((1..=4).contains(&i.kind), "buffer kind {}", i.kind);
                assert_eq!(i.size as usize, self.size_of(b), "buffer size");
            }
        } else {
            let mut d: sluice_tensor_desc_t = zeroed();
            let p = Self::out(s, &mut d);
            self.chk("buffer_tensor", sluice_buffer_tensor(bu(b), p));
        }
    }

    pub(super) fn op_buffer_sync(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Buffer);
        let mut y = sy(0);
        let p = Self::out(s, &mut y);
        if self.chk("buffer_sync", sluice_buffer_sync(bu(b), p)) == 0 {
            self.add(K::Sync, y.bits);
        }
    }

    pub(super) fn op_copy(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let (d, x) = (self.pick(s, K::Buffer), self.pick(s, K::Buffer));
        let (dn, xn) = (self.size_of(d), self.size_of(x));
        let doff = self.within(s, dn);
        let xoff = self.within(s, xn);
        let len = self.within(s, dn.min(xn));
        self.chk(
            "stream_copy",
            sluice_stream_copy(st(b), bu(d), doff, bu(x), xoff, len),
        );
    }

    pub(super) fn op_copy_host(&mut self, s: &mut Src, from: bool) {
        let b = self.pick(s, K::Stream);
        let x = self.pick(s, K::Buffer);
        let n = self.size_of(x);
        let off = self.within(s, n);
        let want = self.within(s, n);
        let (ptr, len) = self.host_range(s, want);
        if from {
            self.chk(
                "stream_copy_from_host",
                sluice_stream_copy_from_host(st(b), bu(x), off, ptr as *const c_void, len),
            );
        } else {
            self.chk(
                "stream_copy_to_host",
                sluice_stream_copy_to_host(st(b), ptr as *mut c_void, bu(x), off, len),
            );
        }
    }

    pub(super) fn op_memset(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let x = self.pick(s, K::Buffer);
        let n = self.size_of(x);
        let off = self.within(s, n);
        let len = self.within(s, n);
        let v = s.u8();
        self.chk(
            "stream_memset",
            sluice_stream_memset(st(b), bu(x), off, v, len),
        );
    }

    pub(super) fn op_sync_query(&mut self, s: &mut Src) {
        let y = self.pick(s, K::Sync);
        match s.u8() % 3 {
            0 => {
                self.chk("sync_wait_read", sluice_sync_wait_read(sy(y)));
            }
            1 => {
                self.chk("sync_wait_write", sluice_sync_wait_write(sy(y)));
            }
            _ => {
                let mut i: sluice_sync_info_t = zeroed();
                let p = Self::out(s, &mut i);
                if self.chk("sync_info", sluice_sync_info(sy(y), p)) == 0 {
                    assert!(i.has_writer <= 1, "has_writer {}", i.has_writer);
                }
            }
        }
    }

    pub(super) fn op_op_begin(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let (r, nr, rnull) = self.syncs(s);
        let (w, nw, wnull) = self.syncs(s);
        let mut o = op(0);
        let p = Self::out(s, &mut o);
        if self.chk(
            "op_begin",
            sluice_op_begin(
                st(b),
                Self::ptr_or_null(&r, rnull),
                nr,
                Self::ptr_or_null(&w, wnull),
                nw,
                p,
            ),
        ) == 0
        {
            self.add(K::Op, o.bits);
        }
    }

    pub(super) fn op_host_func(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let (r, nr, rnull) = self.syncs(s);
        let (w, nw, wnull) = self.syncs(s);
        let rc: i32 = if s.u8() % 16 == 0 { 9 } else { 0 };
        let with_free = s.likely();
        let cb: sluice_host_fn = if s.u8() % 24 == 0 {
            None
        } else {
            Some(host_cb)
        };
        // Without a free function nobody can tell when the callback is done with its
        // data, so it gets a static one.
        static RCS: [i32; 2] = [0, 9];
        let ud = if with_free {
            CB_MADE.fetch_add(1, SeqCst);
            Box::into_raw(Box::new(rc)) as *mut c_void
        } else {
            &RCS[(rc != 0) as usize] as *const i32 as *mut c_void
        };
        let free: sluice_free_fn = if with_free { Some(host_free) } else { None };
        self.chk(
            "stream_launch_host_func",
            sluice_stream_launch_host_func(
                st(b),
                cb,
                ud,
                free,
                Self::ptr_or_null(&r, rnull),
                nr,
                Self::ptr_or_null(&w, wnull),
                nw,
            ),
        );
    }
}

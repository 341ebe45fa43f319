//! The ABI VM's ops: modules and launches, and the prefetcher.

use super::*;

impl Vm {
    pub(super) fn op_module(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        match s.u8() % 6 {
            0 => {
                let n = (s.u8() % 32) as usize;
                let img = s.bytes(n);
                let (ptr, len) = if s.u8() % 8 == 0 {
                    (std::ptr::null(), img.len())
                } else {
                    (img.as_ptr(), img.len())
                };
                let mut m = mo(0);
                let p = Self::out(s, &mut m);
                if self.chk(
                    "module_load",
                    sluice_module_load(dev(d), ptr as *const c_void, len, p),
                ) == 0
                {
                    self.add(K::Module, m.bits);
                }
            }
            1 => {
                let src = c"extern \"C\" __global__ void k(int *p) { *p = 1; }";
                let opt = [c"-default-device".as_ptr()];
                let nopt = (s.u8() % 2) as usize;
                let mut m = mo(0);
                let p = Self::out(s, &mut m);
                let srcp = if s.u8() % 8 == 0 {
                    std::ptr::null()
                } else {
                    src.as_ptr()
                };
                if self.chk(
                    "module_compile",
                    sluice_module_compile(dev(d), srcp, std::ptr::null(), opt.as_ptr(), nopt, p),
                ) == 0
                {
                    self.add(K::Module, m.bits);
                }
            }
            2 => {
                let m = self.pick(s, K::Module);
                let name = if s.bool() {
                    c"k".as_ptr()
                } else {
                    c"".as_ptr()
                };
                let mut f = fu(0);
                let p = Self::out(s, &mut f);
                if self.chk(
                    "module_get_function",
                    sluice_module_get_function(mo(m), name, p),
                ) == 0
                {
                    self.add(K::Function, f.bits);
                }
            }
            3 => {
                let m = self.pick(s, K::Module);
                if self.chk("module_unload", sluice_module_unload(mo(m))) == 0 {
                    self.kill(K::Module, m);
                }
            }
            4 => {
                let f = self.pick(s, K::Function);
                if self.chk("function_destroy", sluice_function_destroy(fu(f))) == 0 {
                    self.kill(K::Function, f);
                }
            }
            _ => {
                let b = self.pick(s, K::Stream);
                let f = self.pick(s, K::Function);
                let dims = sluice_launch_dims_t {
                    grid: [s.u8() as u32 % 3, 1, 1],
                    block: [s.u8() as u32 % 3, 1, 1],
                    shared_mem_bytes: 0,
                };
                let dp = if s.u8() % 8 == 0 {
                    std::ptr::null()
                } else {
                    &dims as *const _
                };
                let (r, nr, rnull) = self.syncs(s);
                self.chk(
                    "stream_launch",
                    sluice_stream_launch(
                        st(b),
                        fu(f),
                        dp,
                        std::ptr::null_mut(),
                        0,
                        Self::ptr_or_null(&r, rnull),
                        nr,
                        std::ptr::null(),
                        0,
                    ),
                );
            }
        }
    }

    pub(super) fn op_prefetcher_create(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let mut cfg: sluice_prefetcher_config_t = zeroed();
        cfg.depth = if s.likely() {
            (s.u8() % 4) as u32
        } else {
            s.u32() % 80
        };
        cfg.segments = if s.likely() {
            1 + (s.u8() % 3) as u32
        } else {
            (s.u8() % 10) as u32
        };
        for i in 0..8 {
            cfg.capacity[i] = match s.u8() % 16 {
                0 => 0,
                1 => [HUGE, usize::MAX, 1 << 62][s.u8() as usize % 3],
                _ => 1 + s.u16() as usize % 4096,
            };
        }
        let pull = s.u8() % 3 == 0;
        let fc = Box::new(FillCfg {
            end_after: (s.u8() % 8) as u64,
            fail_at: (s.u8() % 16) as u64,
            over: s.u8() % 16 == 0,
            n: AtomicU64::new(0),
        });
        if pull {
            cfg.fill = Some(fill_fn);
            cfg.user_data = &*fc as *const FillCfg as *mut c_void;
            cfg.producer_threads = (s.u8() % 3) as u32;
        }
        let mut p = pf(0);
        let out = Self::out(s, &mut p);
        let cp = if s.u8() % 16 == 0 {
            std::ptr::null()
        } else {
            &cfg as *const _
        };
        if self.chk(
            "prefetcher_create",
            sluice_prefetcher_create(dev(d), cp, out),
        ) == 0
        {
            self.add(K::Prefetcher, p.bits);
            self.fill_cfgs.push((p.bits, fc));
        }
    }

    pub(super) fn destroy_prefetcher(&mut self, p: u64) -> u32 {
        // A taken fill must be given back first, or the destroy waits for it.
        let mine: Vec<_> = self
            .fills
            .iter()
            .filter(|f| f.0 == p)
            .map(|f| dup(&f.1))
            .collect();
        for f in mine {
            self.chk("prefetcher_cancel", sluice_prefetcher_cancel(pf(p), &f));
        }
        self.fills.retain(|f| f.0 != p);
        let c = self.chk("prefetcher_destroy", sluice_prefetcher_destroy(pf(p)));
        if c == 0 {
            self.kill(K::Prefetcher, p);
            self.fill_cfgs.retain(|f| f.0 != p);
        }
        c
    }

    pub(super) fn op_prefetcher_destroy(&mut self, s: &mut Src) {
        let p = self.pick(s, K::Prefetcher);
        self.destroy_prefetcher(p);
    }

    pub(super) fn timeout(s: &mut Src) -> u32 {
        (s.u8() % 3) as u32
    }

    pub(super) fn op_prefetcher_push(&mut self, s: &mut Src) {
        let p = self.pick(s, K::Prefetcher);
        let n = (s.u8() % 10) as u32;
        let mut segs = Vec::new();
        for _ in 0..n {
            let want = if s.likely() {
                s.u16() as usize % 4097
            } else {
                self.size(s)
            };
            let (ptr, len) = self.host_range(s, want);
            segs.push(sluice_prefetch_segment_t {
                ptr: ptr as *const c_void,
                len,
            });
        }
        let mut seq = 0u64;
        let sp = if s.bool() {
            std::ptr::null_mut()
        } else {
            &mut seq as *mut u64
        };
        let segp = if s.u8() % 16 == 0 {
            std::ptr::null()
        } else {
            segs.as_ptr()
        };
        let t = Self::timeout(s);
        self.chk(
            "prefetcher_push",
            sluice_prefetcher_push(pf(p), segp, n, t, sp),
        );
    }

    pub(super) fn op_prefetcher_acquire(&mut self, s: &mut Src) {
        let p = self.pick(s, K::Prefetcher);
        if s.u8() % 3 != 0 || self.fills.is_empty() {
            let mut f: sluice_prefetch_fill_t = zeroed();
            let o = Self::out(s, &mut f);
            let t = Self::timeout(s);
            if self.chk("prefetcher_acquire", sluice_prefetcher_acquire(pf(p), t, o)) == 0 {
                assert!(f.segments as usize <= 8 && f.token != 0, "bad fill");
                self.fills.push((p, f));
            }
            return;
        }
        let i = s.u8() as usize % self.fills.len();
        let (owner, mut f) = (self.fills[i].0, dup(&self.fills[i].1));
        for j in 0..(f.segments as usize).min(8) {
            f.len[j] = match s.u8() % 8 {
                0 => f.capacity[j] + 1,
                1 => usize::MAX,
                _ => s.u16() as usize % (f.capacity[j] + 1),
            };
        }
        let target = if s.likely() { owner } else { p };
        if s.u8() % 8 == 0 {
            f.token = s.u64();
        }
        let c = if s.bool() {
            self.chk(
                "prefetcher_submit",
                sluice_prefetcher_submit(pf(target), &f),
            )
        } else {
            self.chk(
                "prefetcher_cancel",
                sluice_prefetcher_cancel(pf(target), &f),
            )
        };
        // The fill is used up when the call reached it: forget it then.
        if target == owner && f.token == self.fills[i].1.token && c != SLUICE_ERROR_NULL_ARGUMENT {
            self.fills.swap_remove(i);
        }
    }

    pub(super) fn op_prefetcher_next(&mut self, s: &mut Src) {
        let p = self.pick(s, K::Prefetcher);
        let b = self.pick(s, K::Stream);
        let t = Self::timeout(s);
        let mut view: sluice_batch_view_t = zeroed();
        if s.bool() {
            let mut bt = ba(0);
            let o = Self::out(s, &mut bt);
            let vp = Self::out(s, &mut view);
            if self.chk(
                "prefetcher_next",
                sluice_prefetcher_next(pf(p), st(b), t, o, vp),
            ) == 0
            {
                self.add(K::Batch, bt.bits);
            }
        } else {
            let n = (s.u8() % 10) as u32;
            let dst: Vec<_> = (0..n).map(|_| bu(self.pick(s, K::Buffer))).collect();
            let dp = if s.u8() % 16 == 0 {
                std::ptr::null()
            } else {
                dst.as_ptr()
            };
            let vp = Self::out(s, &mut view);
            self.chk(
                "prefetcher_next_into",
                sluice_prefetcher_next_into(pf(p), st(b), dp, n, t, vp),
            );
        }
    }

    pub(super) fn op_prefetcher_misc(&mut self, s: &mut Src) {
        match s.u8() % 4 {
            3 => self.op_gather_rows(s),
            0 => {
                let b = self.pick(s, K::Batch);
                self.chk("batch_release", sluice_batch_release(ba(b)));
                self.kill(K::Batch, b);
            }
            1 => {
                let p = self.pick(s, K::Prefetcher);
                self.chk(
                    "prefetcher_close_input",
                    sluice_prefetcher_close_input(pf(p)),
                );
            }
            _ => {
                let p = self.pick(s, K::Prefetcher);
                let mut x: sluice_prefetcher_stats_t = zeroed();
                let o = Self::out(s, &mut x);
                self.chk("prefetcher_stats", sluice_prefetcher_stats(pf(p), o));
            }
        }
    }

    /// `sluice_gather_rows` against a model: the rows named, or an error and `dst`
    /// untouched.
    fn op_gather_rows(&mut self, s: &mut Src) {
        let row = (s.u8() % 40) as usize;
        let src_rows = (s.u8() % 8) as usize;
        let src = s.bytes(row * src_rows);
        let n = s.u8() % 6;
        let rows: Vec<i64> = (0..n)
            .map(|_| match s.likely() {
                true => (s.u8() as usize % src_rows.max(1)) as i64,
                false => (s.u8() as i8 % 9) as i64,
            })
            .collect();
        let cap = (rows.len() * row + (s.u8() % 4) as usize).saturating_sub(1);
        let mut dst = vec![0xA5u8; cap];
        let null = s.u8() % 16;
        let dp = if null == 0 {
            std::ptr::null_mut()
        } else {
            dst.as_mut_ptr()
        };
        let sp = if null == 1 {
            std::ptr::null()
        } else {
            src.as_ptr()
        };
        let rp = if null == 2 {
            std::ptr::null()
        } else {
            rows.as_ptr()
        };
        let e = sluice_gather_rows(dp.cast(), cap, sp.cast(), src.len(), row, rp, rows.len());
        let src_rows = src.len().checked_div(row).unwrap_or(0) as i64;
        let want = if (null == 0 && cap > 0)
            || (null == 1 && !src.is_empty())
            || (null == 2 && !rows.is_empty())
        {
            SLUICE_ERROR_NULL_ARGUMENT
        } else if row == 0 {
            SLUICE_ERROR_INVALID_ARGUMENT
        } else if rows.len() * row > cap || rows.iter().any(|&r| r < 0 || r >= src_rows) {
            SLUICE_ERROR_OUT_OF_RANGE
        } else {
            0
        };
        assert_eq!(
            self.chk("gather_rows", e),
            want,
            "row {row} rows {rows:?} cap {cap} null {null}"
        );
        for (i, chunk) in dst.chunks(row.max(1)).enumerate() {
            let expect = match rows.get(i) {
                Some(&r) if want == 0 => &src[r as usize * row..][..chunk.len()],
                _ => &[0xA5u8; 40][..chunk.len()],
            };
            assert_eq!(chunk, expect, "gather_rows row {i}");
        }
    }
}

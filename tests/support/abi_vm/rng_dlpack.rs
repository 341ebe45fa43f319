//! The ABI VM's ops: the RNG, its checkpoints, and DLPack import and export.

use super::*;

impl Vm {
    pub(super) fn op_rng_create(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let seed = s.u64();
        let n = match s.u8() % 8 {
            0 => 0,
            1 => [HUGE, usize::MAX, 1 << 58, usize::MAX / 64 + 1][s.u8() as usize % 4],
            _ => 1 + s.u16() as usize % 2048,
        };
        let mut r = rn(0);
        let p = Self::out(s, &mut r);
        if self.chk("rng_create", sluice_rng_create(st(b), seed, n, p)) == 0 {
            self.add(K::Rng, r.bits);
        }
    }

    pub(super) fn op_rng_misc(&mut self, s: &mut Src) {
        let r = self.pick(s, K::Rng);
        match s.u8() % 3 {
            0 => {
                if self.chk("rng_destroy", sluice_rng_destroy(rn(r))) == 0 {
                    self.kill(K::Rng, r);
                }
            }
            1 => {
                let (mut n, mut seed) = (0usize, 0u64);
                let (pn, ps) = (Self::out(s, &mut n), Self::out(s, &mut seed));
                self.chk("rng_info", sluice_rng_info(rn(r), pn, ps));
            }
            _ => {
                let mut b = bu(0);
                let p = Self::out(s, &mut b);
                if self.chk("rng_states", sluice_rng_states(rn(r), p)) == 0 {
                    let mut n = 0usize;
                    check_err(
                        "rng_info",
                        sluice_rng_info(rn(r), &mut n, std::ptr::null_mut()),
                    );
                    self.new_buffer(b.bits, n * 64);
                }
            }
        }
    }

    pub(super) fn op_rng_generate(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let r = self.pick(s, K::Rng);
        let dist = if s.likely() {
            (s.u8() % 4) as u32
        } else {
            s.u32()
        };
        let layout = if s.likely() {
            (s.u8() % 3) as u32
        } else {
            s.u32()
        };
        let x = self.pick(s, K::Buffer);
        let n = self.size_of(x);
        let off = self.within(s, n);
        let count = if s.likely() {
            s.u8() as usize % 16
        } else {
            self.size(s)
        };
        self.chk(
            "rng_generate",
            sluice_rng_generate(st(b), rn(r), dist, layout, bu(x), off, count),
        );
    }

    pub(super) fn op_ckpt(&mut self, s: &mut Src) {
        match s.u8() % 4 {
            0 => {
                let (b, r) = (self.pick(s, K::Stream), self.pick(s, K::Rng));
                let mut c = ck(0);
                let p = Self::out(s, &mut c);
                if self.chk(
                    "rng_checkpoint_create",
                    sluice_rng_checkpoint_create(st(b), rn(r), p),
                ) == 0
                {
                    self.add(K::Ckpt, c.bits);
                }
            }
            1 => {
                let c = self.pick(s, K::Ckpt);
                if self.chk(
                    "rng_checkpoint_destroy",
                    sluice_rng_checkpoint_destroy(ck(c)),
                ) == 0
                {
                    self.kill(K::Ckpt, c);
                }
            }
            2 => {
                let c = self.pick(s, K::Ckpt);
                let (mut n, mut seed) = (0usize, 0u64);
                let (pn, ps) = (Self::out(s, &mut n), Self::out(s, &mut seed));
                self.chk(
                    "rng_checkpoint_info",
                    sluice_rng_checkpoint_info(ck(c), pn, ps),
                );
            }
            _ => {
                let (b, r, c) = (
                    self.pick(s, K::Stream),
                    self.pick(s, K::Rng),
                    self.pick(s, K::Ckpt),
                );
                if s.bool() {
                    self.chk("rng_save", sluice_rng_save(st(b), rn(r), ck(c)));
                } else {
                    self.chk("rng_restore", sluice_rng_restore(st(b), rn(r), ck(c)));
                }
            }
        }
    }

    pub(super) fn op_ckpt_serialize(&mut self, s: &mut Src) {
        let c = self.pick(s, K::Ckpt);
        let mut need = 0usize;
        let lp = Self::out(s, &mut need);
        match s.u8() % 3 {
            0 => {
                self.chk(
                    "rng_checkpoint_serialize",
                    sluice_rng_checkpoint_serialize(ck(c), std::ptr::null_mut(), 0, lp),
                );
            }
            _ => {
                let cap = if s.likely() {
                    SCRATCH
                } else {
                    s.u16() as usize
                };
                let out = self.scratch.as_mut_ptr();
                let code = self.chk(
                    "rng_checkpoint_serialize",
                    sluice_rng_checkpoint_serialize(ck(c), out, cap, lp),
                );
                if code == 0 && !lp.is_null() {
                    assert!(need <= cap, "serialize wrote {need} into {cap}");
                    self.serialized = self.scratch[..need].to_vec();
                }
            }
        }
    }

    pub(super) fn op_ckpt_deserialize(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let mut bytes = match s.u8() % 4 {
            0 => {
                let n = s.u8() as usize;
                s.bytes(n)
            }
            _ => self.serialized.clone(),
        };
        // Mutate: flip bytes, truncate, or extend.
        for _ in 0..(s.u8() % 4) {
            match s.u8() % 3 {
                0 if !bytes.is_empty() => {
                    let i = s.u16() as usize % bytes.len();
                    bytes[i] ^= s.u8() | 1;
                }
                1 if !bytes.is_empty() => {
                    let n = s.u16() as usize % bytes.len();
                    bytes.truncate(n);
                }
                _ => bytes.push(s.u8()),
            }
        }
        let ptr = if s.u8() % 16 == 0 {
            std::ptr::null()
        } else {
            bytes.as_ptr()
        };
        let mut c = ck(0);
        let p = Self::out(s, &mut c);
        if self.chk(
            "rng_checkpoint_deserialize",
            sluice_rng_checkpoint_deserialize(dev(d), ptr, bytes.len(), p),
        ) == 0
        {
            self.add(K::Ckpt, c.bits);
        }
    }

    pub(super) fn op_to_dlpack(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Buffer);
        let consumer = if s.bool() { 0 } else { self.pick(s, K::Stream) };
        let format = if s.likely() {
            1 + (s.u8() % 2) as u32
        } else {
            s.u32()
        };
        let shape = [s.u8() as i64 - 2, s.u8() as i64, s.u8() as i64 % 4];
        let desc = sluice_tensor_desc_t {
            dtype_code: s.u8() % 8,
            dtype_bits: [8, 16, 32, 64, 1, 4, 0, 128][s.u8() as usize % 8],
            dtype_lanes: (s.u8() % 3) as u16,
            ndim: (s.u8() % 5) as i32 - 1,
            shape: if s.u8() % 8 == 0 {
                std::ptr::null()
            } else {
                shape.as_ptr()
            },
            read_only: 0,
        };
        let dp = if s.bool() {
            std::ptr::null()
        } else {
            &desc as *const _
        };
        let dp = if desc.ndim > 3 { std::ptr::null() } else { dp };
        let mut t: *mut c_void = std::ptr::null_mut();
        let tp = Self::out(s, &mut t);
        if self.chk(
            "buffer_to_dlpack",
            sluice_buffer_to_dlpack(bu(b), st(consumer), format, dp, tp),
        ) == 0
        {
            assert!(!t.is_null(), "to_dlpack gave NULL");
            self.exported.push(Exported { ptr: t, format });
        }
    }

    pub(super) fn delete_exported(e: Exported) {
        // SAFETY: a tensor sluice exported in this format, deleted exactly once.
        unsafe {
            if e.format == SLUICE_DLPACK_VERSIONED {
                let t = e.ptr as *mut DLManagedTensorVersioned;
                ((*t).deleter.expect("deleter"))(t);
            } else {
                let t = e.ptr as *mut DLManagedTensor;
                ((*t).deleter.expect("deleter"))(t);
            }
        }
    }

    pub(super) fn op_dlpack_delete(&mut self, s: &mut Src) {
        if !self.exported.is_empty() {
            let i = s.u8() as usize % self.exported.len();
            Self::delete_exported(self.exported.swap_remove(i));
        } else if !self.own_tensors.is_empty() {
            let i = s.u8() as usize % self.own_tensors.len();
            let t = self.own_tensors.swap_remove(i);
            // SAFETY: still ours.
            unsafe { free_own(t) };
        }
    }

    pub(super) fn make_own_tensor(&mut self, s: &mut Src, versioned: bool) -> *mut c_void {
        let n = 1 + s.u16() as usize % 4096;
        // Room for n elements of up to 255 bits: the tensor never claims more than it has.
        let mut t = Box::new(OwnTensor {
            v: zeroed(),
            u: zeroed(),
            shape: [n as i64, 1, 1, 1],
            data: vec![0u8; n * 32],
        });
        match s.u8() % 16 {
            0 => t.shape[0] = -1 - s.u8() as i64,
            1 => t.shape = [i64::MAX, i64::MAX, 2, 1],
            2 => t.shape[1] = 0,
            _ => {}
        }
        let mut ndim = if s.likely() { 1 } else { s.u8() as i32 % 6 - 1 };
        if t.shape[0] == i64::MAX {
            // Only as an overflow: one such dimension alone would claim memory we lack.
            ndim = ndim.max(2);
        }
        let dl = DLTensor {
            data: if s.u8() % 16 == 0 {
                std::ptr::null_mut()
            } else {
                t.data.as_mut_ptr() as *mut c_void
            },
            device: DLDevice {
                device_type: if s.likely() { 1 } else { s.u8() as i32 % 16 },
                device_id: if s.likely() { 0 } else { s.u8() as i32 },
            },
            ndim: ndim.min(4),
            dtype: DLDataType {
                code: 1,
                bits: if s.likely() { 8 } else { s.u8() },
                lanes: 1,
            },
            shape: if s.u8() % 16 == 0 {
                std::ptr::null_mut()
            } else {
                t.shape.as_mut_ptr()
            },
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let raw = Box::into_raw(t);
        // SAFETY: raw is a fresh box; the tensors point into it.
        unsafe {
            if versioned {
                (*raw).v = DLManagedTensorVersioned {
                    version: DLPackVersion {
                        major: if s.likely() { 1 } else { s.u8() as u32 },
                        minor: 1,
                    },
                    manager_ctx: raw as *mut c_void,
                    deleter: Some(own_deleter_v),
                    flags: 0,
                    dl_tensor: dl,
                };
                &mut (*raw).v as *mut _ as *mut c_void
            } else {
                (*raw).u = DLManagedTensor {
                    dl_tensor: dl,
                    manager_ctx: raw as *mut c_void,
                    deleter: Some(own_deleter_u),
                };
                &mut (*raw).u as *mut _ as *mut c_void
            }
        }
    }

    pub(super) fn op_from_dlpack(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let ready = if s.bool() { 0 } else { self.pick(s, K::Stream) };
        let mut b = bu(0);
        // A tensor sluice exported (round trip), or one of our own.
        if !self.exported.is_empty() && s.bool() {
            let i = s.u8() as usize % self.exported.len();
            let (ptr, format) = (self.exported[i].ptr, self.exported[i].format);
            let p = Self::out(s, &mut b);
            if self.chk(
                "buffer_from_dlpack",
                sluice_buffer_from_dlpack(dev(d), ptr, format, st(ready), p),
            ) == 0
            {
                self.exported.swap_remove(i);
                let mut info: sluice_buffer_info_t = zeroed();
                check_err("buffer_info", sluice_buffer_info(b, &mut info));
                self.new_buffer(b.bits, info.size as usize);
            }
            return;
        }
        let versioned = s.bool();
        let format = if s.likely() {
            if versioned {
                SLUICE_DLPACK_VERSIONED
            } else {
                SLUICE_DLPACK_UNVERSIONED
            }
        } else {
            s.u32()
        };
        let t = self.make_own_tensor(s, versioned);
        DL_MADE.fetch_add(1, SeqCst);
        let p = Self::out(s, &mut b);
        let tp = if s.u8() % 16 == 0 {
            std::ptr::null_mut()
        } else {
            t
        };
        if self.chk(
            "buffer_from_dlpack",
            sluice_buffer_from_dlpack(dev(d), tp, format, st(ready), p),
        ) == 0
        {
            let mut info: sluice_buffer_info_t = zeroed();
            check_err("buffer_info", sluice_buffer_info(b, &mut info));
            self.new_buffer(b.bits, info.size as usize);
        } else {
            // Still ours on error.
            let ot = if versioned {
                // SAFETY: t is the `v` field of an OwnTensor.
                unsafe { (*(t as *mut DLManagedTensorVersioned)).manager_ctx as *mut OwnTensor }
            } else {
                // SAFETY: t is the `u` field of an OwnTensor.
                unsafe { (*(t as *mut DLManagedTensor)).manager_ctx as *mut OwnTensor }
            };
            self.own_tensors.push(ot);
        }
    }
}

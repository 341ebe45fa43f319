//! Philox4x32-10 (Salmon et al., Random123) and a per-sample state that follows
//! cuRAND's `curandStatePhilox4_32_10_t` draw for draw: state `i` of a generator
//! seeded with `seed` is `curand_init(seed, i, 0, &s)`.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// 2^-32, and half of it: cuRAND's uniform maps `x` to `x * 2^-32 + 2^-33`.
const TWO_POW_32_INV: f32 = 2.328_306_4e-10;

/// One Philox4x32 block with 10 rounds.
pub fn philox4x32_10(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for round in 0..10 {
        if round > 0 {
            key = [key[0].wrapping_add(W0), key[1].wrapping_add(W1)];
        }
        let p0 = M0 as u64 * ctr[0] as u64;
        let p1 = M1 as u64 * ctr[2] as u64;
        ctr = [
            (p1 >> 32) as u32 ^ ctr[1] ^ key[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ ctr[3] ^ key[1],
            p0 as u32,
        ];
    }
    ctr
}

/// A per-sample state, with cuRAND's field order and size (64 bytes), so that a
/// state saved on one backend restores on the other.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhiloxState {
    pub ctr: [u32; 4],
    pub output: [u32; 4],
    pub key: [u32; 2],
    /// The next word of `output` to return (0 to 3).
    pub state: u32,
    pub boxmuller_flag: i32,
    pub boxmuller_flag_double: i32,
    pub boxmuller_extra: f32,
    pub boxmuller_extra_double: f64,
}

const _: () = assert!(std::mem::size_of::<PhiloxState>() == 64);

impl PhiloxState {
    /// `curand_init(seed, subsequence, offset, &state)`.
    pub fn new(seed: u64, subsequence: u64, offset: u64) -> PhiloxState {
        let mut s = PhiloxState {
            ctr: [0; 4],
            output: [0; 4],
            key: [seed as u32, (seed >> 32) as u32],
            state: 0,
            boxmuller_flag: 0,
            boxmuller_flag_double: 0,
            boxmuller_extra: 0.0,
            boxmuller_extra_double: 0.0,
        };
        s.add_hi(subsequence);
        s.skip(offset);
        s
    }

    /// Adds `n` to the upper 64 bits of the counter (the subsequence).
    fn add_hi(&mut self, n: u64) {
        let (lo, mut hi) = (n as u32, (n >> 32) as u32);
        self.ctr[2] = self.ctr[2].wrapping_add(lo);
        if self.ctr[2] < lo {
            hi = hi.wrapping_add(1);
        }
        self.ctr[3] = self.ctr[3].wrapping_add(hi);
    }

    /// Adds `n` to the 128-bit counter.
    fn add(&mut self, n: u64) {
        let (lo, mut hi) = (n as u32, (n >> 32) as u32);
        self.ctr[0] = self.ctr[0].wrapping_add(lo);
        if self.ctr[0] < lo {
            hi = hi.wrapping_add(1);
        }
        self.ctr[1] = self.ctr[1].wrapping_add(hi);
        if hi <= self.ctr[1] {
            return;
        }
        self.ctr[2] = self.ctr[2].wrapping_add(1);
        if self.ctr[2] != 0 {
            return;
        }
        self.ctr[3] = self.ctr[3].wrapping_add(1);
    }

    /// `skipahead(n, &state)`: skips `n` 32-bit outputs.
    pub fn skip(&mut self, n: u64) {
        // Wrapping, as in C: a state read back from device memory may hold anything.
        self.state = self.state.wrapping_add((n & 3) as u32);
        let mut blocks = n / 4;
        if self.state > 3 {
            blocks += 1;
            self.state -= 4;
        }
        self.add(blocks);
        self.output = philox4x32_10(self.ctr, self.key);
    }

    /// `curand(&state)`: the next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        // cuRAND's `switch (STATE++)` with `default: x`: a corrupt STATE (a user
        // kernel or copy wrote the states) reads `x`, never out of bounds.
        let r = match self.state {
            1 => self.output[1],
            2 => self.output[2],
            3 => self.output[3],
            _ => self.output[0],
        };
        self.state = self.state.wrapping_add(1);
        if self.state == 4 {
            self.add(1);
            self.output = philox4x32_10(self.ctr, self.key);
            self.state = 0;
        }
        r
    }

    /// `curand_uniform(&state)`: a float in (0, 1].
    pub fn next_uniform(&mut self) -> f32 {
        uniform(self.next_u32())
    }
}

/// cuRAND's map of a 32-bit output to (0, 1]. The product is exact (a power of
/// two), so a fused and an unfused multiply-add give the same float.
pub fn uniform(x: u32) -> f32 {
    (x as f32).mul_add(TWO_POW_32_INV, TWO_POW_32_INV / 2.0)
}

impl PhiloxState {
    /// `curand_normal(&state)`: normals come in pairs, the second kept in the
    /// state. Raw draws and the state's flags match cuRAND exactly; the floats
    /// themselves differ from the device's by a few ulps (see [`box_muller`]).
    pub fn next_normal(&mut self) -> f32 {
        if self.boxmuller_flag != 1 {
            let (x, y) = (self.next_u32(), self.next_u32());
            let (a, b) = box_muller(x, y);
            self.boxmuller_extra = b;
            self.boxmuller_flag = 1;
            return a;
        }
        self.boxmuller_flag = 0;
        self.boxmuller_extra
    }
}

/// cuRAND's Box-Muller transform of two 32-bit outputs, in f32 with the same
/// fused multiply-adds. The device computes the sine and cosine with the
/// hardware's `__sincosf` and its own `logf`, which the host cannot reproduce
/// bit for bit: host normals are within about 4e-6 of the device's.
pub fn box_muller(x: u32, y: u32) -> (f32, f32) {
    const TWO_PI_INV: f32 = TWO_POW_32_INV * 6.283_185_5;
    let u = (x as f32).mul_add(TWO_POW_32_INV, TWO_POW_32_INV / 2.0);
    let v = (y as f32).mul_add(TWO_PI_INV, TWO_PI_INV / 2.0);
    let r = (-2.0f32 * u.ln()).sqrt();
    let (s, c) = v.sin_cos();
    (s * r, c * r)
}

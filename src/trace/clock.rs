//! The trace clock: nanoseconds since the first use, read on the op path twice per
//! traced op. On x86-64 with an invariant TSC it is the time-stamp counter scaled by
//! a factor calibrated once against CLOCK_MONOTONIC (about 2 ms, when tracing
//! starts); elsewhere CLOCK_MONOTONIC itself. A TSC read costs a few ns where a
//! `clock_gettime` costs 20 to 40 ns (tools/driver-probes/clock_cost.c).

use std::sync::OnceLock;

/// How long the TSC is measured against CLOCK_MONOTONIC.
const CALIBRATE_NS: u64 = 2_000_000;

struct Clock {
    origin_ns: u64,
    /// (TSC at the origin, ns per tick as a 32.32 fixed-point factor).
    tsc: Option<(u64, u64)>,
}

static CLOCK: OnceLock<Clock> = OnceLock::new();

/// CLOCK_MONOTONIC in ns.
#[inline(always)]
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Whether the CPU says its TSC runs at a constant rate in every state and core
/// (CPUID 0x8000_0007, EDX bit 8), and `SLUICE_TRACE_CLOCK` does not ask for
/// CLOCK_MONOTONIC.
#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    if std::env::var("SLUICE_TRACE_CLOCK").as_deref() == Ok("monotonic") {
        return false;
    }
    let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
    max >= 0x8000_0007 && core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
}

fn start() -> Clock {
    #[cfg(target_arch = "x86_64")]
    if invariant_tsc() {
        let (t0, n0) = (tsc(), mono_ns());
        let (t1, n1) = loop {
            let n = mono_ns();
            if n - n0 >= CALIBRATE_NS {
                break (tsc(), n);
            }
            std::hint::spin_loop();
        };
        if t1 > t0 {
            let factor = (((n1 - n0) as u128) << 32) / (t1 - t0) as u128;
            if let Ok(factor) = u64::try_from(factor) {
                return Clock {
                    origin_ns: n0,
                    tsc: Some((t0, factor)),
                };
            }
        }
    }
    Clock {
        origin_ns: mono_ns(),
        tsc: None,
    }
}

/// Starts the clock now if it has not started (its calibration spins ~2 ms).
pub(crate) fn init() {
    CLOCK.get_or_init(start);
}

/// Nanoseconds since the clock started.
#[inline(always)]
pub(crate) fn since_start_ns() -> u64 {
    let c = CLOCK.get_or_init(start);
    #[cfg(target_arch = "x86_64")]
    if let Some((t0, factor)) = c.tsc {
        return ((tsc().wrapping_sub(t0) as u128 * factor as u128) >> 32) as u64;
    }
    mono_ns().saturating_sub(c.origin_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_follows_monotonic_time() {
        init();
        let (a, m0) = (since_start_ns(), mono_ns());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (b, m1) = (since_start_ns(), mono_ns());
        let (got, want) = ((b - a) as f64, (m1 - m0) as f64);
        assert!(
            (got - want).abs() < want * 0.01,
            "{got} ns against {want} ns"
        );
    }
}

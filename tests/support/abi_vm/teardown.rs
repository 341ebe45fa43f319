//! The ABI VM's teardown: everything destroyed, the process-wide settings restored,
//! and the balances checked.

use super::*;

impl Vm {
    /// Destroys everything, restores the process-wide settings, checks the balances.
    pub fn teardown(&mut self) {
        for o in std::mem::take(&mut self.live[K::Op as usize]) {
            check_err("op_end", sluice_op_end(op(o)));
        }
        for b in std::mem::take(&mut self.capturing) {
            let mut g = gr(0);
            if check_err("graph_capture_end", sluice_graph_capture_end(st(b), &mut g)) == 0 {
                self.add(K::Graph, g.bits);
            }
        }
        for (p, f) in std::mem::take(&mut self.fills) {
            check_err("prefetcher_cancel", sluice_prefetcher_cancel(pf(p), &f));
        }
        for b in std::mem::take(&mut self.live[K::Batch as usize]) {
            check_err("batch_release", sluice_batch_release(ba(b)));
        }
        for e in std::mem::take(&mut self.exported) {
            Self::delete_exported(e);
        }
        for t in std::mem::take(&mut self.own_tensors) {
            // SAFETY: still ours.
            unsafe { free_own(t) };
        }
        // Streams stay until the end so that the frees have their home streams.
        let order = [
            K::Exec,
            K::Graph,
            K::Cache,
            K::Event,
            K::Function,
            K::Module,
            K::Ckpt,
            K::Rng,
            K::Prefetcher,
            K::Sync,
            K::Buffer,
            K::Stream,
        ];
        for k in order {
            for b in std::mem::take(&mut self.live[k as usize]) {
                let e = match k {
                    K::Exec => sluice_graph_exec_destroy(ex(b)),
                    K::Graph => sluice_graph_destroy(gr(b)),
                    K::Cache => sluice_graph_cache_destroy(gc(b)),
                    K::Event => sluice_event_destroy(ev(b)),
                    K::Function => sluice_function_destroy(fu(b)),
                    K::Module => sluice_module_unload(mo(b)),
                    K::Ckpt => sluice_rng_checkpoint_destroy(ck(b)),
                    K::Rng => sluice_rng_destroy(rn(b)),
                    K::Prefetcher => {
                        self.live[k as usize].push(b);
                        let c = self.destroy_prefetcher(b);
                        assert_eq!(c, 0, "prefetcher_destroy at teardown");
                        continue;
                    }
                    K::Sync => sluice_sync_destroy(sy(b)),
                    K::Buffer => sluice_buffer_free(bu(b)),
                    _ => sluice_stream_destroy(st(b)),
                };
                assert_eq!(
                    check_err("teardown destroy", e),
                    0,
                    "{k:?} destroy at teardown"
                );
            }
        }
        // Wait for the devices, then close them; the anchor last.
        let devices = std::mem::take(&mut self.live[K::Device as usize]);
        for d in devices.into_iter().chain(self.anchor.take()) {
            let c = check_err("device_wait_all", sluice_device_wait_all(dev(d)));
            assert!(
                c == 0 || c == SLUICE_ERROR_CALLBACK_FAILED || c == SLUICE_ERROR_DEVICE_FAULT,
                "wait_all {c}"
            );
            assert_eq!(check_err("device_close", sluice_device_close(dev(d))), 0);
        }
        check_err("trace_stop", sluice_trace_stop());
        check_err("log_set_level", sluice_log_set_level(SLUICE_LOG_OFF));
        check_err(
            "engine_set_mode",
            sluice_engine_set_mode(SLUICE_ENGINE_ASYNC),
        );
        check_err(
            "graph_cache_set_enabled",
            sluice_graph_cache_set_enabled(true),
        );
        check_err("counters_set_enabled", sluice_counters_set_enabled(false));
        self.fill_cfgs.clear();
        assert_eq!(
            sluice_live_handles(),
            self.baseline,
            "live handles after destroying everything"
        );
        // Frees and releases may trail on library threads: wait a little for them.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let ok = CB_MADE.load(SeqCst) == CB_FREED.load(SeqCst)
                && REL_MADE.load(SeqCst) == REL_DONE.load(SeqCst)
                && DL_MADE.load(SeqCst) == DL_DONE.load(SeqCst);
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "unbalanced: callbacks {}/{} freed, releases {}/{}, dlpack {}/{}",
                CB_FREED.load(SeqCst),
                CB_MADE.load(SeqCst),
                REL_DONE.load(SeqCst),
                REL_MADE.load(SeqCst),
                DL_DONE.load(SeqCst),
                DL_MADE.load(SeqCst)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        self.host_mem.clear();
        assert_eq!(BAD.load(SeqCst), 0, "a callback saw a bad error object");
    }
}

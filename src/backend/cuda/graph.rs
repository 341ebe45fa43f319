//! Graph capture and graphs on the driver API.

use super::device::{h, raw, CudaDevice};
use super::driver::*;
use crate::backend::CaptureMode;
use crate::backend::GraphApi;
use crate::error::{Error, ErrorCode, Result};
use cudarc::driver::sys::{CUgraph, CUgraphExec};
use std::ffi::{c_uint, CStr};
use std::ptr::null_mut;

impl GraphApi for CudaDevice {
    fn capture_begin(&self, stream: u64, mode: CaptureMode) -> Result<()> {
        let d = self.bind()?;
        let mode: c_uint = match mode {
            CaptureMode::Global => 0,
            CaptureMode::ThreadLocal => 1,
            CaptureMode::Relaxed => 2,
        };
        // SAFETY: a live stream of this device; mode is a valid CUstreamCaptureMode.
        let res = unsafe { (d.cuStreamBeginCapture_v2)(h(stream), mode) };
        d.check(res, "cuStreamBeginCapture")
    }

    fn capture_end(&self, stream: u64) -> Result<u64> {
        let d = self.bind()?;
        let mut g: CUgraph = null_mut();
        // SAFETY: a live stream; writes one graph handle.
        let res = unsafe { (d.cuStreamEndCapture)(h(stream), &mut g) };
        d.check(res, "cuStreamEndCapture")?;
        if g.is_null() {
            return Err(Error::new(
                ErrorCode::CaptureFailed,
                "cuStreamEndCapture returned no graph (the capture was invalidated)",
            ));
        }
        Ok(raw(g))
    }

    fn capture_active(&self, stream: u64) -> Result<bool> {
        let d = self.bind()?;
        let mut status: c_uint = 0;
        // SAFETY: a live stream; writes one int.
        let res = unsafe { (d.cuStreamIsCapturing)(h(stream), &mut status) };
        d.check(res, "cuStreamIsCapturing")?;
        // ACTIVE (1) and INVALIDATED (2) both still need cuStreamEndCapture.
        Ok(status != 0)
    }

    fn graph_destroy(&self, graph: u64) {
        if let Ok(d) = self.bind() {
            // SAFETY: a live graph, destroyed once.
            let _ = unsafe { (d.cuGraphDestroy)(h(graph)) };
        }
    }

    fn graph_instantiate(&self, graph: u64) -> Result<u64> {
        let d = self.bind()?;
        let mut exec: CUgraphExec = null_mut();
        // SAFETY: a live graph; writes one exec handle.
        let res = unsafe { (d.cuGraphInstantiateWithFlags)(&mut exec, h(graph), 0) };
        d.check(res, "cuGraphInstantiateWithFlags")?;
        Ok(raw(exec))
    }

    fn graph_exec_destroy(&self, exec: u64) {
        if let Ok(d) = self.bind() {
            // SAFETY: a live exec, destroyed once.
            let _ = unsafe { (d.cuGraphExecDestroy)(h(exec)) };
        }
    }

    fn graph_upload(&self, exec: u64, stream: u64) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: a live exec and stream.
        let res = unsafe { (d.cuGraphUpload)(h(exec), h(stream)) };
        d.check(res, "cuGraphUpload")
    }

    fn graph_launch(&self, exec: u64, stream: u64) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: a live exec and stream.
        let res = unsafe { (d.cuGraphLaunch)(h(exec), h(stream)) };
        d.check(res, "cuGraphLaunch")
    }

    fn graph_exec_update(&self, exec: u64, graph: u64) -> Result<std::result::Result<(), String>> {
        let d = self.bind()?;
        let mut info = UpdateResultInfo {
            result: 0,
            error_node: null_mut(),
            error_from_node: null_mut(),
        };
        // SAFETY: a live exec and graph; info matches CUgraphExecUpdateResultInfo's layout.
        let res = unsafe { (d.cuGraphExecUpdate_v2)(h(exec), h(graph), &mut info) };
        match res {
            CUDA_SUCCESS => Ok(Ok(())),
            CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE => {
                let mut reason = update_result_reason(info.result);
                if !info.error_node.is_null() {
                    let mut ty: c_uint = 0;
                    // SAFETY: the driver returned a node of `graph`; writes one int.
                    if unsafe { (d.cuGraphNodeGetType)(info.error_node, &mut ty) } == CUDA_SUCCESS {
                        reason = format!("{reason} (at a {} node)", node_type_name(ty));
                    }
                }
                Ok(Err(reason))
            }
            _ => Err(d.err(res, "cuGraphExecUpdate")),
        }
    }

    fn graph_node_count(&self, graph: u64) -> Result<usize> {
        let d = self.bind()?;
        let mut n: usize = 0;
        // SAFETY: a live graph; with a NULL array the driver only writes the count.
        let res = unsafe { (d.cuGraphGetNodes)(h(graph), null_mut(), &mut n) };
        d.check(res, "cuGraphGetNodes")?;
        Ok(n)
    }

    fn graph_debug_dot(&self, graph: u64, path: &CStr, verbose: bool) -> Result<()> {
        let d = self.bind()?;
        let flags = if verbose {
            CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE
        } else {
            0
        };
        // SAFETY: a live graph; path is NUL-terminated.
        let res = unsafe { (d.cuGraphDebugDotPrint)(h(graph), path.as_ptr(), flags) };
        d.check(res, "cuGraphDebugDotPrint")
    }
}

// sluice C++ bindings: header-only C++17 over the C ABI in <sluice.h>.
//
// Every C handle type has a move-only owning class (Device, Stream, Event, Buffer,
// SyncObject, Op, Module, Function, Graph, GraphExec, GraphCache, Prefetcher,
// Batch, Rng, RngCheckpoint; Capture is the scope of an open graph capture, Fill
// that of a prefetcher slot being filled) and, where handles are passed around, a
// trivially copyable non-owning view (DeviceRef, StreamRef, EventRef, BufferRef,
// SyncRef, GraphRef, GraphExecRef, GraphCacheRef, PrefetcherRef, RngRef,
// RngCheckpointRef). Every fallible operation has a
// throwing form and a `std::nothrow`-tagged form returning [[nodiscard]]
// sluice::Result<T>; under -fno-exceptions only the latter exists. Traces,
// counters and logs (sluice::trace, sluice::counters, sluice::log) are
// process-wide functions in sluice/trace.hpp. See bindings/cpp/README.md.
#ifndef SLUICE_CPP_SLUICE_HPP
#define SLUICE_CPP_SLUICE_HPP

#include "sluice/config.hpp"
#include "sluice/error.hpp"
#include "sluice/result.hpp"
#include "sluice/span.hpp"
#include "sluice/library.hpp"
#include "sluice/device.hpp"
#include "sluice/event.hpp"
#include "sluice/sync.hpp"
#include "sluice/stream.hpp"
#include "sluice/buffer.hpp"
#include "sluice/copy.hpp"
#include "sluice/dlpack.hpp"
#include "sluice/op.hpp"
#include "sluice/module.hpp"
#include "sluice/graph.hpp"
#include "sluice/prefetcher.hpp"
#include "sluice/rng.hpp"
#include "sluice/trace.hpp"

#endif  // SLUICE_CPP_SLUICE_HPP

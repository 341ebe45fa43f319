// Package sluice is the Go binding of sluice, a GPU stream runtime with a
// stable C ABI (include/sluice.h). Every copy, kernel and host callback is
// bound to an explicit *Stream, passed as the receiver or the first argument.
// There is no "current stream" and no thread-local state anywhere, so
// goroutines may call sluice from any OS thread, and hop between threads
// between two calls, with no runtime.LockOSThread.
//
// # Types and handles
//
// Each type wraps one C handle: Device, Stream, Event, Buffer (device
// memory: allocated, or foreign from WrapDevice and ImportDLPack), PinnedBuffer (pinned host memory), HostBuffer (registered host
// memory), SyncObject, Op, Module, Function, Graph, GraphExec,
// GraphCache, Prefetcher, Batch, RNG and RNGCheckpoint.
//
//   - Close releases the handle. It is idempotent, and safe to call while
//     other goroutines use the object: each call either sees the object or
//     returns an error matching ErrClosed (and ErrInvalidHandle). Use after
//     Close never crashes.
//   - A runtime cleanup releases handles of wrappers that become unreachable
//     without Close. It is a safety net; call Close.
//   - Children keep their parents alive: an Event its Stream, a Stream and a
//     Buffer their Device, a Function its Module, a Graph, GraphExec and
//     GraphCache their Device, an RNG its Stream and Device, an
//     RNGCheckpoint its Device. The library does the same on its side, so
//     cleanups may run in any order.
//   - Closing a stream or freeing a buffer with work in flight is safe: the
//     work completes and the memory stays valid until then.
//
// # Errors
//
// Every fallible call returns nil or an *Error with a stable Code, the
// library's Message (copied into Go; the C error is freed at once) and the
// CUDA DriverCode. *Error implements Is by code, so
//
//	errors.Is(err, sluice.ErrOutOfRange)
//
// works for every code, through wrapping too.
//
// # Dependencies between streams
//
// Every buffer has a sync object; copies, memsets, launches, host callbacks
// and foreign ops (Stream.BeginOp/Op.End, Stream.RunOp) declare what they
// read and write. Conflicting work on other streams is then ordered on the
// device (stream waits on events), and the host never blocks. Host waits
// are explicit: SyncObject.WaitRead (before the host reads memory a stream
// wrote), WaitWrite (before the host writes memory streams use),
// Stream.Synchronize and Device.WaitAll.
//
// # Memory and the cgo pointer rules
//
// The C library never keeps a Go pointer:
//
//   - CopyFromHost and CopyToHost (and their typed forms CopyFromHostSlice
//     and CopyToHostSlice) take Go memory ([]byte, []float32, ...) for the
//     duration of the call only: CopyFromHost returns once the source may be
//     reused, CopyToHost once the bytes have arrived. They are synchronous
//     with respect to the Go memory, so the Go garbage collector and the
//     cgo rules are satisfied. The typed forms reinterpret the slice with
//     unsafe.Slice; nothing is copied on the Go side.
//   - Only C memory is used asynchronously: PinnedBuffer (from the device's
//     pinned pool) and HostBuffer (AllocHost allocates C memory;
//     RegisterHost takes caller-owned memory that must not be Go memory, for
//     example a syscall.Mmap mapping). Their Bytes method returns a []byte
//     view of that C memory. The view is valid until Close: keep the buffer
//     reachable while using it, call WaitWrite before writing it while copies
//     may read it, and WaitRead before reading what a copy wrote into it.
//   - Host callbacks and graph-cache bodies are Go functions registered
//     through runtime/cgo.Handle: C receives an integer, never a Go pointer.
//   - Kernel arguments are copied into C memory for the launch.
//   - Foreign device memory (WrapDevice) takes a Go release function, held
//     by a cgo.Handle and called once after the buffer's last use; DLPack
//     tensors (ImportDLPack, ExportDLPack) travel as C pointers.
//
// # Host callbacks
//
// Stream.HostCallback runs a Go function in stream order on a driver thread
// (a worker thread on the host backend): once, or, when it was enqueued
// during a graph capture (host backend only), once per launch of the graph.
// It must not call sluice. A callback that returns an error or panics does
// not crash the process: the panic is recovered, and the stream's next
// synchronisation returns an ErrCallbackFailed error whose Cause is the
// callback's error or a *CallbackPanicError carrying the panic value and
// stack.
//
// The function is held by a cgo.Handle that the library releases, through
// the free_user_data function of sluice_stream_launch_host_func, exactly once,
// when the callback can no longer run: after it ran, when the HostCallback
// call failed, or, for a captured callback, when the last Graph and
// GraphExec (or GraphCache) holding it are closed. Until then the function
// and what it captures stay reachable.
//
// # Graphs
//
// Stream.BeginCapture and Stream.EndCapture record the ops issued on a
// stream (and on streams that fork from it by waiting on its events, and
// join back) into a Graph instead of running them. Graph.Instantiate makes a
// GraphExec, which GraphExec.Launch runs on any stream of the device as one
// tracked op: it waits for the earlier users of every buffer the graph
// touches and records one event after, like any other op. GraphExec.Update
// swaps in a new graph, in place when the topology is unchanged. Host
// synchronisation, allocation and pageable copies are rejected during a
// capture (ErrCaptureUnsupported) and abort it (EndCapture returns
// ErrCaptureFailed); the streams are usable again afterwards either way.
//
// GraphCache.Run(key, stream, body) runs a region eagerly once, captures it
// the second time and replays the graph after that, without calling body.
// body is a Go function called synchronously from inside the library call
// (it may call sluice); it receives a non-owning view of the stream. Its
// error or panic becomes Run's error. SetGraphsEnabled(false) makes every
// run eager.
//
// The library's graphs do not own the buffers they use. A Graph, GraphExec
// or GraphCache keeps the Go wrappers of those buffers reachable, so that no
// runtime cleanup frees them, but closing a buffer that a live graph still
// uses is the caller's error: close the graphs first.
//
// # Traces, counters and logs
//
// TraceStart(path) and TraceStop write a Chrome trace-event JSON file
// (Perfetto, chrome://tracing) of what the streams did: a track per stream
// named after its label (Stream.SetLabel), a span per op, an arrow from each
// op to the op whose wait the engine inserted for it, graphs, allocations,
// prefetcher batches and log messages. SLUICE_TRACE=path starts one without
// code. The file is a valid prefix while it is written, and complete JSON
// after TraceStop. A Go program must call TraceStop before it ends (also with
// SLUICE_TRACE): Go's exit does not run the C atexit hook that stops the
// trace in C programs, and what was not yet flushed, device spans included,
// is lost. Tracing is process-wide.
//
// Device.Counters and ProcessCounters return a Counters snapshot: waits
// inserted, deduplicated and skipped, events, bytes copied per direction,
// allocator, graph cache and prefetcher counters. The few that cost work on
// every op count only while SetCountersEnabled(true), SLUICE_COUNTERS=1 or a
// trace is on.
//
// SetLogLevel (or SLUICE_LOG=error|warn|info|debug) turns the library's log
// on; it is off by default, and the library writes nothing unless asked.
// Messages go to stderr, or to the function given to SetLogCallback. That
// function is never called on the thread that logs (which may be a driver
// thread, hold library locks, or be inside a C call that cgo makes with
// `#cgo nocallback`): a C receiver queues each message in C memory, and a
// goroutine of this package calls the function with them, in order. It may
// call sluice, except SetLogCallback. SetLogCallback returns once the
// callback it replaces has received every message logged before the call.
//
// # Backends
//
// SLUICE_BACKEND=auto|cuda|host picks the default device
// (OpenDefaultDevice). The host backend runs every stream on a CPU worker
// thread with CUDA stream semantics, so programs and tests run without a GPU;
// CUDA-only operations such as LoadModule return ErrUnsupported there.
//
// # Building
//
// By default the package links the library built in this repository
// (target/release, with an rpath); build it first with `go generate` in this
// directory or `cargo build --release` at the repository root. The build tag
// sluice_pkgconfig links an installed library through pkg-config instead.
// The build tag sluice_debug forces a garbage collection in every handle
// accessor, to catch missing runtime.KeepAlive calls in tests.
package sluice

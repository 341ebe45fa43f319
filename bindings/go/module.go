package sluice

/*
#include "sluice.h"
#include "shims.h"

// sluice_stream_launch with the argument values in vals, 8 bytes each (Go
// memory holding no Go pointers): the array of pointers to them is built on
// this C stack and dropped on return, so no Go pointer outlives the call and
// cgo has no pointer to check per call.
static inline sluice_error_t *sluice_go_launch(sluice_stream_t stream, sluice_function_t function,
                                               const sluice_launch_dims_t *dims, uint64_t *vals,
                                               size_t num_args, const sluice_sync_t *reads,
                                               size_t num_reads, const sluice_sync_t *writes,
                                               size_t num_writes) {
	void *ptrs[num_args > 0 ? num_args : 1];
	for (size_t i = 0; i < num_args; i++) ptrs[i] = &vals[i];
	return sluice_stream_launch(stream, function, dims, num_args > 0 ? ptrs : NULL, num_args,
	                            reads, num_reads, writes, num_writes);
}
*/
import "C"

import (
	"math"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// Module is a loaded module (PTX, cubin or fatbin; sluice_module_t), or one
// compiled from CUDA C with CompileModule. Its Functions keep it loaded, and
// it keeps its Device alive. Modules exist on the cuda backend only: on host,
// LoadModule and CompileModule fail with ErrUnsupported.
type Module struct {
	h   handle[C.sluice_module_t]
	dev *Device
}

// Function is a kernel of a Module (sluice_function_t).
type Function struct {
	h    handle[C.sluice_function_t]
	mod  *Module
	name string
}

// LoadModule loads a module from PTX text, a cubin or a fatbin. A failed JIT
// compile gives ErrModuleLoad with the JIT log in the message. The image is
// not retained. The *Module owns the handle: Close releases it, or a runtime
// cleanup does if the Module becomes unreachable first.
func (d *Device) LoadModule(image []byte) (*Module, error) {
	const op = "Device.LoadModule"
	h, err := d.h.raw(op)
	if err != nil {
		return nil, err
	}
	var m C.sluice_module_t
	e := C.sluice_module_load(h, unsafe.Pointer(unsafe.SliceData(image)), C.size_t(len(image)), &m)
	runtime.KeepAlive(d)
	runtime.KeepAlive(image)
	if err := check(e, &d.h); err != nil {
		return nil, err
	}
	out := &Module{dev: d}
	openHandle(out, &out.h, m)
	return out, nil
}

// CompileModule compiles CUDA C source with NVRTC and loads the result
// (sluice_module_compile). name names the program in the compile log ("" gives
// "sluice_kernel.cu"); options go to NVRTC as they are. Without
// --gpu-architecture (or -arch) the target is the device's own. The source may
// #include <sluice/rng.cuh> with no include path. Kernels looked up with
// Function need extern "C" (NVRTC compiles C++).
//
// A compile error gives ErrCompile with the compile log in the message; the
// host backend, or a machine without NVRTC, gives ErrUnsupported. With
// SLUICE_KERNEL_CACHE=dir compiled images are cached in dir. The *Module owns
// the handle as for LoadModule.
func (d *Device) CompileModule(source, name string, options ...string) (*Module, error) {
	const op = "Device.CompileModule"
	h, err := d.h.raw(op)
	if err != nil {
		return nil, err
	}
	for i, o := range options {
		if strings.IndexByte(o, 0) >= 0 {
			return nil, argError(CodeInvalidArgument, op, "option %d contains a NUL byte", i)
		}
	}
	if strings.IndexByte(source, 0) >= 0 || strings.IndexByte(name, 0) >= 0 {
		return nil, argError(CodeInvalidArgument, op, "the source or the name contains a NUL byte")
	}
	csrc := C.CString(source)
	defer C.free(unsafe.Pointer(csrc))
	var cname *C.char
	if name != "" {
		cname = C.CString(name)
		defer C.free(unsafe.Pointer(cname))
	}
	// The option strings and the array of their pointers live in C memory.
	var copts **C.char
	if n := len(options); n > 0 {
		arr := C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(uintptr(0))))
		if arr == nil {
			return nil, argError(CodeOutOfMemory, op, "no memory for %d options", n)
		}
		defer C.free(arr)
		ptrs := unsafe.Slice((**C.char)(arr), n)
		for i, o := range options {
			ptrs[i] = C.CString(o)
			defer C.free(unsafe.Pointer(ptrs[i]))
		}
		copts = &ptrs[0]
	}
	var m C.sluice_module_t
	e := C.sluice_module_compile(h, csrc, cname, copts, C.size_t(len(options)), &m)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return nil, err
	}
	out := &Module{dev: d}
	openHandle(out, &out.h, m)
	return out, nil
}

// Close releases the module handle that the Module owns; the module unloads
// once its functions are closed too. Close is idempotent.
func (m *Module) Close() error { return m.h.close() }

// Device returns the module's device.
func (m *Module) Device() *Device { return m.dev }

// Function looks up kernel name. A missing name gives ErrNotFound. The
// *Function owns its handle (Close releases it, or a runtime cleanup does if
// the Function becomes unreachable first), which keeps the module loaded.
func (m *Module) Function(name string) (*Function, error) {
	const op = "Module.Function"
	h, err := m.h.raw(op)
	if err != nil {
		return nil, err
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.sluice_function_t
	e := C.sluice_module_get_function(h, cs, &f)
	runtime.KeepAlive(m)
	if err := check(e, &m.h); err != nil {
		return nil, err
	}
	out := &Function{mod: m, name: name}
	openHandle(out, &out.h, f)
	return out, nil
}

// Close releases the function handle that the Function owns. Close is
// idempotent.
func (f *Function) Close() error { return f.h.close() }

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// Module returns the function's module.
func (f *Function) Module() *Module { return f.mod }

// SetProgrammaticLaunch turns programmatic dependent launch on or off for
// the function's later launches (compute capability 9.0 and newer; below
// that, enabling fails with ErrUnsupported): a launch may then start before
// the kernel ahead of it on its stream completes, so its launch and prologue
// overlap that kernel's tail (in a captured graph, a programmatic edge). The
// kernel must wait for the kernel ahead itself, with griddepcontrol.wait
// (cudaGridDependencySynchronize), before it reads what that kernel wrote or
// writes what it reads. Ordering against other streams and sync objects is
// unchanged.
func (f *Function) SetProgrammaticLaunch(enabled bool) error {
	return callOn(&f.h, "Function.SetProgrammaticLaunch", func(h C.sluice_function_t) *C.sluice_error_t {
		return C.sluice_function_set_programmatic_launch(h, C.bool(enabled))
	})
}

// SetNonPortableClusterSizeAllowed lets the function's later launches, from
// any goroutine and captured ones included, use a thread block cluster larger
// than the portable 8 blocks (the kernel's __cluster_dims__), up to what the
// device supports (16 on an H100 or H200); such a launch may fail on other
// devices (sluice_function_set_non_portable_cluster_size_allowed). Enabling
// it below compute capability 9.0 gives ErrUnsupported.
func (f *Function) SetNonPortableClusterSizeAllowed(allowed bool) error {
	return callOn(&f.h, "Function.SetNonPortableClusterSizeAllowed", func(h C.sluice_function_t) *C.sluice_error_t {
		return C.sluice_function_set_non_portable_cluster_size_allowed(h, C.bool(allowed))
	})
}

// SetMaxDynamicSharedMemory lets the function's later launches, from any
// goroutine and captured ones included, ask for up to bytes of dynamic shared
// memory per block (LaunchConfig.SharedMemBytes); a launch asking for more than
// 48 KiB needs this first (sluice_function_set_max_dynamic_shared_memory).
// bytes plus the kernel's static shared memory over the device's opt-in limit
// per block gives ErrInvalidArgument, with the numbers in the message, as does
// a negative bytes or one over MaxUint32 (without calling C); the host backend
// gives ErrUnsupported.
func (f *Function) SetMaxDynamicSharedMemory(bytes int) error {
	const op = "Function.SetMaxDynamicSharedMemory"
	h, err := f.h.raw(op)
	if err != nil {
		return err
	}
	if bytes < 0 || uint64(bytes) > math.MaxUint32 {
		return argError(CodeInvalidArgument, op, "%d bytes out of range", bytes)
	}
	e := C.sluice_function_set_max_dynamic_shared_memory(h, C.uint32_t(bytes))
	runtime.KeepAlive(f)
	return check(e, &f.h)
}

// Dim3 is a 3-D size. A zero component counts as 1.
type Dim3 struct{ X, Y, Z uint32 }

// LaunchConfig is the geometry of a kernel launch.
type LaunchConfig struct {
	// Grid is the grid size in blocks.
	Grid Dim3
	// Block is the block size in threads.
	Block Dim3
	// SharedMemBytes is the dynamic shared memory per block.
	SharedMemBytes uint32
}

// cDims is the C form of the geometry.
func (cfg LaunchConfig) cDims() C.sluice_launch_dims_t {
	return C.sluice_launch_dims_t{
		grid:             [3]C.uint32_t{one(cfg.Grid.X), one(cfg.Grid.Y), one(cfg.Grid.Z)},
		block:            [3]C.uint32_t{one(cfg.Block.X), one(cfg.Block.Y), one(cfg.Block.Z)},
		shared_mem_bytes: C.uint32_t(cfg.SharedMemBytes),
	}
}

// one is v, or 1 for a zero component.
func one(v uint32) C.uint32_t { return C.uint32_t(max(v, 1)) }

// Launch launches the function on the stream as one tracked op over reads and
// writes. args are the kernel's parameters, in order, each one of: a
// *Buffer (passed as its CUdeviceptr), int8, uint8, int16, uint16, int32,
// uint32, int64, uint64, float32, float64, uintptr. Plain int and uint are
// refused, since their C width is ambiguous; so are more than MaxLaunchArgs
// arguments.
//
// Launch allocates nothing in steady state: args does not escape, so the
// values that the call boxes into its ...any stay on the caller's stack; the
// parameter values are written into an array on Launch's own stack (a pooled
// one beyond 16), and the read and write sets are handled as by BeginOpInto.
func (f *Function) Launch(s *Stream, cfg LaunchConfig, reads, writes []Syncable, args ...any) error {
	const op = "Function.Launch"
	root := s.root()
	sh, err := root.h.raw(op)
	if err != nil {
		return err
	}
	fh, err := f.h.raw(op)
	if err != nil {
		return err
	}
	dims := cfg.cDims()
	// No defers: the scratch buffers are released by hand on every path (a
	// pooled buffer that a panic left borrowed is only garbage).
	var sc syncScratch
	r, w, err := sc.sets(op, reads, writes)
	if err != nil {
		sc.release()
		return err
	}
	var av argVals
	vals, err := av.fill(op, args)
	if err != nil {
		sc.release()
		av.release()
		return err
	}
	e := C.sluice_go_launch(sh, fh, &dims, valsPtr(vals), C.size_t(len(vals)),
		syncPtr(r), C.size_t(len(r)), syncPtr(w), C.size_t(len(w)))
	runtime.KeepAlive(s)
	runtime.KeepAlive(f)
	runtime.KeepAlive(reads)
	runtime.KeepAlive(writes)
	runtime.KeepAlive(args)
	if sc.rx != nil || sc.wx != nil {
		sc.release()
	}
	av.release()
	if e != nil {
		return launchFailed(e, op, s, f, reads, writes)
	}
	if root.capture.Load() != nil {
		launchCaptureKeep(s, reads, writes, args)
	}
	return nil
}

// launchC is Launch's C call (sluice_go_launch, visible only from this file),
// on resolved handles, sets and argument values, for the cgo floor that
// BenchmarkLaunchBareCgo measures. Launch makes the call itself: launchC is
// not inlined, and Launch saves the frame.
func launchC(sh C.sluice_stream_t, fh C.sluice_function_t, dims *C.sluice_launch_dims_t, vals []uint64,
	r, w []C.sluice_sync_t) *C.sluice_error_t {
	return C.sluice_go_launch(sh, fh, dims, valsPtr(vals), C.size_t(len(vals)),
		syncPtr(r), C.size_t(len(r)), syncPtr(w), C.size_t(len(w)))
}

// launchFailed is the error of a launch that the C call refused.
func launchFailed(e *C.sluice_error_t, op string, s *Stream, f *Function, reads, writes []Syncable) error {
	err := checkSetsFailed(e, op, s, [][]Syncable{reads, writes})
	if se, ok := err.(*Error); ok && f.h.isClosed() && se.Code == CodeInvalidHandle {
		se.closed = true
	}
	return err
}

// launchCaptureKeep notes what a launch on the capturing stream s uses: its
// sets and the buffers among its arguments.
func launchCaptureKeep(s *Stream, reads, writes []Syncable, args []any) {
	s.captureKeep(reads, writes)
	for _, a := range args {
		if b, ok := a.(*Buffer); ok {
			s.captureKeep([]Syncable{heapBuffer(b)})
		}
	}
}

// heapBuffer returns b, hiding from escape analysis that it flows from args
// into the capture's keep set, so that Launch's args do not escape (and the
// caller's boxed values stay on its stack). This is sound because every
// *Buffer that a launch accepted is open, and open Buffers are made only by
// this package's constructors, on the heap; the boxed non-pointer values
// are never kept.
func heapBuffer(b *Buffer) *Buffer {
	u := uintptr(unsafe.Pointer(b))
	return *(**Buffer)(unsafe.Pointer(&u))
}

// MaxLaunchArgs is the most arguments Launch takes (CUDA's parameter space,
// 32764 bytes, holds fewer 8-byte values).
const MaxLaunchArgs = 4096

// maxStackArgs is the number of argument values a launch keeps in its own
// frame; more borrow a pooled buffer.
const maxStackArgs = 16

// argVals holds one launch's argument values, 8 bytes each: Go memory with
// no Go pointers, which C may read during the call (sluice_go_launch). Call
// release after the C call.
type argVals struct {
	stack  [maxStackArgs]uint64
	pooled *[]uint64
}

// argBufs are the pooled value buffers of launches over maxStackArgs.
var argBufs = sync.Pool{New: func() any { return new([]uint64) }}

// fill writes args into a and returns the values.
func (a *argVals) fill(op string, args []any) ([]uint64, error) {
	n := len(args)
	if n > MaxLaunchArgs {
		return nil, argError(CodeInvalidArgument, op, "%d kernel arguments (at most %d)", n, MaxLaunchArgs)
	}
	vals := a.stack[:min(n, maxStackArgs)]
	if n > maxStackArgs {
		p := argBufs.Get().(*[]uint64)
		a.pooled = p
		if cap(*p) < n {
			*p = make([]uint64, n)
		}
		vals = (*p)[:n]
	}
	for i, arg := range args {
		vals[i] = 0
		if err := putArg(op, i, arg, unsafe.Pointer(&vals[i])); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

// release returns the pooled buffer fill borrowed.
func (a *argVals) release() {
	if a.pooled != nil {
		argBufs.Put(a.pooled)
		a.pooled = nil
	}
}

func valsPtr(v []uint64) *C.uint64_t {
	if len(v) == 0 {
		return nil
	}
	return (*C.uint64_t)(unsafe.Pointer(&v[0]))
}

func putArg(op string, i int, a any, slot unsafe.Pointer) error {
	switch v := a.(type) {
	case *Buffer:
		if v == nil {
			return argError(CodeNullArgument, op, "argument %d is a nil *Buffer", i)
		}
		if v.h.load() == 0 {
			return closedError(op + ": argument " + strconv.Itoa(i))
		}
		*(*uint64)(slot) = v.info.DevicePtr
	case int8:
		*(*int8)(slot) = v
	case uint8:
		*(*uint8)(slot) = v
	case int16:
		*(*int16)(slot) = v
	case uint16:
		*(*uint16)(slot) = v
	case int32:
		*(*int32)(slot) = v
	case uint32:
		*(*uint32)(slot) = v
	case int64:
		*(*int64)(slot) = v
	case uint64:
		*(*uint64)(slot) = v
	case float32:
		*(*uint32)(slot) = math.Float32bits(v)
	case float64:
		*(*uint64)(slot) = math.Float64bits(v)
	case uintptr:
		*(*uint64)(slot) = uint64(v)
	default:
		// reflect.TypeOf, not %T: a must not escape (see Launch).
		name := "nil"
		if t := reflect.TypeOf(a); t != nil {
			name = t.String()
		}
		return argError(CodeInvalidArgument, op, "argument %d has unsupported type %s", i, name)
	}
	return nil
}

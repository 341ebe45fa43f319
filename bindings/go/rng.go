package sluice

/*
#include "sluice.h"
*/
import "C"

import (
	"runtime"
	"strconv"
	"unsafe"
)

// RNGDistribution is what RNG.Generate draws (SLUICE_RNG_*).
type RNGDistribution uint32

const (
	// RNGU32: raw 32-bit outputs, cuRAND's curand.
	RNGU32 RNGDistribution = C.SLUICE_RNG_U32
	// RNGUniform: float32 in (0, 1], cuRAND's curand_uniform.
	RNGUniform RNGDistribution = C.SLUICE_RNG_UNIFORM
	// RNGNormal: standard normal float32, cuRAND's curand_normal (drawn in
	// pairs: a state's second normal comes from the same Box-Muller step).
	RNGNormal RNGDistribution = C.SLUICE_RNG_NORMAL
)

// String gives the distribution's name: "U32", "Uniform" or "Normal".
func (d RNGDistribution) String() string {
	switch d {
	case RNGU32:
		return "U32"
	case RNGUniform:
		return "Uniform"
	case RNGNormal:
		return "Normal"
	}
	return "RNGDistribution(" + strconv.FormatUint(uint64(d), 10) + ")"
}

// RNGLayout is where RNG.Generate puts draw j of state i, in 32-bit words
// from the offset (SLUICE_RNG_LAYOUT_*).
type RNGLayout uint32

const (
	// RNGSampleMajor: word j*nStates + i; each draw of every state together
	// (coalesced on the GPU).
	RNGSampleMajor RNGLayout = C.SLUICE_RNG_LAYOUT_SAMPLE_MAJOR
	// RNGStateMajor: word i*count + j; each state's draws together.
	RNGStateMajor RNGLayout = C.SLUICE_RNG_LAYOUT_STATE_MAJOR
)

// String gives the layout's name: "SampleMajor" or "StateMajor".
func (l RNGLayout) String() string {
	switch l {
	case RNGSampleMajor:
		return "SampleMajor"
	case RNGStateMajor:
		return "StateMajor"
	}
	return "RNGLayout(" + strconv.FormatUint(uint64(l), 10) + ")"
}

// RNGStateBytes is the size of one state in device memory: cuRAND's
// curandStatePhilox4_32_10_t, sluice_rng_state of include/sluice/rng.cuh.
const RNGStateBytes = 64

// RNGInfo describes a generator or a checkpoint.
type RNGInfo struct {
	// NStates is the number of per-sample states.
	NStates int
	// Seed is the seed the states were made from: of NewRNG, or, for a
	// generator, of the checkpoint it restored last.
	Seed uint64
}

// RNG is a generator (sluice_rng_t): NStates per-sample Philox4x32-10 states
// in device memory. State i starts as cuRAND's curand_init(seed, i, 0), and
// every draw equals cuRAND's (normals within 1e-5 on the host backend).
// Generate draws on an explicit stream and advances the states on the device,
// so a captured draw replays as a new draw each time; Save and Restore copy
// the states into and out of an RNGCheckpoint in stream order.
//
// An RNG may be used from many goroutines at once; its draws are ordered by
// the streams, as for any buffer. It keeps its Stream and Device alive. The
// *RNG owns the handle: Close destroys it, or a runtime cleanup does if the
// RNG becomes unreachable first.
type RNG struct {
	h      handle[C.sluice_rng_t]
	dev    *Device
	stream *Stream
	n      int
}

// NewRNG makes a generator of nStates states with seed on the stream's
// device; the states are allocated and initialised in order on the stream
// (the host does not wait). It fails with ErrInvalidArgument for 0 states,
// ErrOutOfRange when the states do not fit, and ErrCaptureUnsupported during
// a capture (which then fails, as for Alloc): make generators first.
func NewRNG(s *Stream, seed uint64, nStates int) (*RNG, error) {
	const op = "NewRNG"
	if s == nil {
		return nil, argError(CodeNullArgument, op, "nil stream")
	}
	sh, err := s.raw(op)
	if err != nil {
		return nil, err
	}
	if nStates < 0 {
		return nil, argError(CodeInvalidArgument, op, "negative state count %d", nStates)
	}
	var r C.sluice_rng_t
	e := C.sluice_rng_create(sh, C.uint64_t(seed), C.size_t(nStates), &r)
	runtime.KeepAlive(s)
	if err := check(e, s.hs()); err != nil {
		return nil, err
	}
	out := &RNG{dev: s.dev, stream: s.root(), n: nStates}
	openHandle(out, &out.h, r)
	return out, nil
}

// Close destroys the generator handle; its states are freed in stream order
// after every draw, save and restore that uses them. Close is idempotent.
func (r *RNG) Close() error { return r.h.close() }

// NStates returns the number of states (fixed at creation).
func (r *RNG) NStates() int { return r.n }

// Device returns the device of the states.
func (r *RNG) Device() *Device { return r.dev }

// Info asks the library for the number of states and the seed (of creation,
// or of the checkpoint restored last).
func (r *RNG) Info() (RNGInfo, error) {
	return rngInfo(&r.h, "RNG.Info", func(h C.sluice_rng_t, n *C.size_t, seed *C.uint64_t) *C.sluice_error_t {
		return C.sluice_rng_info(h, n, seed)
	})
}

// rngInfo is the Info of a generator or a checkpoint: call, on the live handle h,
// writes the number of states and the seed.
func rngInfo[T cHandle, H liveHandle[T]](h H, op string, call func(T, *C.size_t, *C.uint64_t) *C.sluice_error_t) (RNGInfo, error) {
	var n C.size_t
	var seed C.uint64_t
	if err := callOn(h, op, func(c T) *C.sluice_error_t { return call(c, &n, &seed) }); err != nil {
		return RNGInfo{}, err
	}
	return RNGInfo{NStates: int(n), Seed: uint64(seed)}, nil
}

// Generate draws count values from every state into buf (device memory) at
// byte offset off, a multiple of 4: NStates*count 32-bit words (uint32 for
// RNGU32, float32 otherwise) placed by layout. It is one tracked op on s that
// writes the states and buf, and advances the states on the device.
//
// Errors: ErrOutOfRange when the words do not fit in buf; ErrInvalidArgument
// for an unknown distribution or layout, a misaligned offset, or a buffer that
// is not device memory. A refused call draws nothing.
func (r *RNG) Generate(s *Stream, dist RNGDistribution, layout RNGLayout, buf Memory, off, count int) error {
	const op = "RNG.Generate"
	if s == nil {
		return argError(CodeNullArgument, op, "nil stream")
	}
	sh, m, bh, err := streamAndBuffer(op, s, buf, off, count)
	if err != nil {
		return err
	}
	h, err := r.h.raw(op)
	if err != nil {
		return err
	}
	e := C.sluice_rng_generate(sh, h, C.uint32_t(dist), C.uint32_t(layout), bh, C.size_t(off), C.size_t(count))
	runtime.KeepAlive(s)
	runtime.KeepAlive(r)
	runtime.KeepAlive(m)
	if err := check(e, s.hs(), &r.h, &m.h); err != nil {
		return err
	}
	s.captureKeep([]Syncable{m})
	s.captureKeepObjects(r)
	return nil
}

// States returns a new handle to the device buffer of the states (NStates *
// RNGStateBytes bytes, one sluice_rng_state of include/sluice/rng.cuh each),
// for your own kernels: a launch that draws from them must list the buffer
// (or its Sync object) as written, so that draws, saves and restores on
// other streams are ordered around it. The *Buffer owns only that handle
// (Close it when done; the RNG keeps its states); its Stream is the RNG's.
func (r *RNG) States() (*Buffer, error) {
	h, err := r.h.raw("RNG.States")
	if err != nil {
		return nil, err
	}
	var b C.sluice_buffer_t
	e := C.sluice_rng_states(h, &b)
	runtime.KeepAlive(r)
	if err := check(e, &r.h); err != nil {
		return nil, err
	}
	return newMemory[Buffer](b, r.dev, r.stream, nil)
}

// Save copies the states into c: a device-to-device copy in order on s, after
// every earlier draw; the host does not wait. It is allowed during a capture,
// and then each replay of the graph refreshes c. It fails with
// ErrInvalidArgument when the state counts differ.
func (r *RNG) Save(s *Stream, c *RNGCheckpoint) error {
	return r.withCheckpoint("RNG.Save", s, c, func(sh C.sluice_stream_t, rh C.sluice_rng_t, ch C.sluice_rng_checkpoint_t) *C.sluice_error_t {
		return C.sluice_rng_save(sh, rh, ch)
	})
}

// Restore copies c's states into the generator, in order on s (after the
// draws on any stream that came before), and takes c's seed as the
// generator's. It fails with ErrInvalidArgument when the state counts differ.
func (r *RNG) Restore(s *Stream, c *RNGCheckpoint) error {
	return r.withCheckpoint("RNG.Restore", s, c, func(sh C.sluice_stream_t, rh C.sluice_rng_t, ch C.sluice_rng_checkpoint_t) *C.sluice_error_t {
		return C.sluice_rng_restore(sh, rh, ch)
	})
}

// withCheckpoint is Save and Restore: call, on the three handles, in order
// on s.
func (r *RNG) withCheckpoint(op string, s *Stream, c *RNGCheckpoint, call func(C.sluice_stream_t, C.sluice_rng_t, C.sluice_rng_checkpoint_t) *C.sluice_error_t) error {
	if s == nil || c == nil {
		return argError(CodeNullArgument, op, "nil stream or checkpoint")
	}
	sh, err := s.raw(op)
	if err != nil {
		return err
	}
	rh, err := r.h.raw(op)
	if err != nil {
		return err
	}
	ch, err := c.h.raw(op + "(checkpoint)")
	if err != nil {
		return err
	}
	e := call(sh, rh, ch)
	runtime.KeepAlive(s)
	runtime.KeepAlive(r)
	runtime.KeepAlive(c)
	if err := check(e, s.hs(), &r.h, &c.h); err != nil {
		return err
	}
	s.captureKeepObjects(r, c)
	return nil
}

// RNGCheckpoint is a copy of a generator's states on the device
// (sluice_rng_checkpoint_t), filled by RNG.Save or DeserializeRNGCheckpoint,
// and turned into bytes by Serialize. It may be used from many goroutines at
// once and keeps its Device alive. The *RNGCheckpoint owns the handle: Close
// destroys it, or a runtime cleanup does if it becomes unreachable first.
type RNGCheckpoint struct {
	h   handle[C.sluice_rng_checkpoint_t]
	dev *Device
	n   int
}

// NewRNGCheckpoint makes a checkpoint of r's states, allocated in order on s
// and holding the states as of this point on s (a first Save). It is not allowed during a capture (ErrCaptureUnsupported, and
// the capture fails, as for Alloc): make checkpoints first, then Save into
// them in the capture.
func NewRNGCheckpoint(s *Stream, r *RNG) (*RNGCheckpoint, error) {
	const op = "NewRNGCheckpoint"
	if s == nil || r == nil {
		return nil, argError(CodeNullArgument, op, "nil stream or RNG")
	}
	sh, err := s.raw(op)
	if err != nil {
		return nil, err
	}
	rh, err := r.h.raw(op)
	if err != nil {
		return nil, err
	}
	var c C.sluice_rng_checkpoint_t
	e := C.sluice_rng_checkpoint_create(sh, rh, &c)
	runtime.KeepAlive(s)
	runtime.KeepAlive(r)
	if err := check(e, s.hs(), &r.h); err != nil {
		return nil, err
	}
	return newCheckpoint(c, s.dev)
}

func newCheckpoint(c C.sluice_rng_checkpoint_t, dev *Device) (*RNGCheckpoint, error) {
	out := &RNGCheckpoint{dev: dev}
	openHandle(out, &out.h, c)
	info, err := out.Info()
	if err != nil {
		out.Close()
		return nil, err
	}
	out.n = info.NStates
	return out, nil
}

// DeserializeRNGCheckpoint reads bytes made by Serialize (in this process or
// another) onto dev. Every field and the CRC32C are checked: a changed byte, a
// truncation, another format version or another algorithm gives an error
// matching ErrCorruptData, with a message, and no checkpoint. b is only read
// during the call.
func DeserializeRNGCheckpoint(dev *Device, b []byte) (*RNGCheckpoint, error) {
	const op = "DeserializeRNGCheckpoint"
	if dev == nil {
		return nil, argError(CodeNullArgument, op, "nil device")
	}
	dh, err := dev.h.raw(op)
	if err != nil {
		return nil, err
	}
	var p *C.uint8_t
	if len(b) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&b[0]))
	}
	var c C.sluice_rng_checkpoint_t
	e := C.sluice_rng_checkpoint_deserialize(dh, p, C.size_t(len(b)), &c)
	runtime.KeepAlive(dev)
	runtime.KeepAlive(b)
	if err := check(e, &dev.h); err != nil {
		return nil, err
	}
	return newCheckpoint(c, dev)
}

// Close destroys the checkpoint handle; its memory is freed after the copies
// that use it. Close is idempotent.
func (c *RNGCheckpoint) Close() error { return c.h.close() }

// NStates returns the number of states the checkpoint holds.
func (c *RNGCheckpoint) NStates() int { return c.n }

// Device returns the device the checkpoint lives on.
func (c *RNGCheckpoint) Device() *Device { return c.dev }

// Info asks the library for the checkpoint's number of states and seed.
func (c *RNGCheckpoint) Info() (RNGInfo, error) {
	return rngInfo(&c.h, "RNGCheckpoint.Info", func(h C.sluice_rng_checkpoint_t, n *C.size_t, seed *C.uint64_t) *C.sluice_error_t {
		return C.sluice_rng_checkpoint_info(h, n, seed)
	})
}

// SerializedLen returns the size in bytes of Serialize's output.
func (c *RNGCheckpoint) SerializedLen() (int, error) {
	h, err := c.h.raw("RNGCheckpoint.SerializedLen")
	if err != nil {
		return 0, err
	}
	var n C.size_t
	e := C.sluice_rng_checkpoint_serialize(h, nil, 0, &n)
	runtime.KeepAlive(c)
	if err := check(e, &c.h); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Serialize returns the checkpoint as a versioned byte string: magic
// "SLRNGCK\x00", format version, algorithm, number of states, seed, the
// states, and a CRC32C. It is one bulk device-to-host copy that waits for
// the last Save into the checkpoint, not for later work on the Save's stream,
// and blocks until the bytes are written.
func (c *RNGCheckpoint) Serialize() ([]byte, error) {
	n, err := c.SerializedLen()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if err := c.SerializeInto(b); err != nil {
		return nil, err
	}
	return b, nil
}

// SerializeInto writes Serialize's bytes into the start of b, which must hold
// at least SerializedLen bytes (else ErrOutOfRange, and nothing is written).
func (c *RNGCheckpoint) SerializeInto(b []byte) error {
	const op = "RNGCheckpoint.SerializeInto"
	h, err := c.h.raw(op)
	if err != nil {
		return err
	}
	var p *C.uint8_t
	if len(b) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&b[0]))
	} else {
		// A non-NULL pointer, so that the C call checks the capacity rather
		// than only reporting the size.
		var one C.uint8_t
		p = &one
	}
	var n C.size_t
	e := C.sluice_rng_checkpoint_serialize(h, p, C.size_t(len(b)), &n)
	runtime.KeepAlive(c)
	runtime.KeepAlive(b)
	return check(e, &c.h)
}

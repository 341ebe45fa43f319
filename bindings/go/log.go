package sluice

/*
#include "sluice.h"
#include "shims.h"
*/
import "C"

import (
	"fmt"
	"strconv"
	"sync"
	"unsafe"
)

// LogLevel is a level of the library's log messages (SLUICE_LOG_*): a level
// enables the messages of that level and of the levels before it.
type LogLevel uint32

const (
	// LogOff: nothing is logged (the default).
	LogOff LogLevel = C.SLUICE_LOG_OFF
	// LogError: errors only.
	LogError LogLevel = C.SLUICE_LOG_ERROR
	// LogWarn: errors and warnings (a capture aborted by an operation).
	LogWarn LogLevel = C.SLUICE_LOG_WARN
	// LogInfo: also notable events (graph update fallbacks, cache evictions,
	// traces started and stopped).
	LogInfo LogLevel = C.SLUICE_LOG_INFO
	// LogDebug: everything (stale handles used, blocks the caches gave back).
	LogDebug LogLevel = C.SLUICE_LOG_DEBUG
)

// String returns "off", "error", "warn", "info", "debug" or "level(N)".
func (l LogLevel) String() string {
	switch l {
	case LogOff:
		return "off"
	case LogError:
		return "error"
	case LogWarn:
		return "warn"
	case LogInfo:
		return "info"
	case LogDebug:
		return "debug"
	}
	return "level(" + strconv.FormatUint(uint64(l), 10) + ")"
}

// SetLogLevel sets the process-wide log level. It overrides
// SLUICE_LOG=error|warn|info|debug; logging is off by default, and the
// library writes nothing unless asked. An unknown level fails with
// ErrInvalidArgument.
func SetLogLevel(level LogLevel) error {
	return takeError(C.sluice_log_set_level(C.uint32_t(level)))
}

// logQueueMessages is the capacity of the C queue (SLUICE_GO_LOG_QUEUE in
// shims.c).
const logQueueMessages = 1024

// SetLogCallback sends the library's log messages to fn instead of stderr;
// nil goes back to stderr. The level is unchanged: see SetLogLevel.
//
// The library logs on whatever thread does the work (a goroutine's thread
// inside a call, a driver or worker thread), possibly while it holds locks.
// So fn is not called there: each message is copied into a queue in C
// memory, and one goroutine of this package calls fn with the messages in
// the order they were queued, shortly after they were logged. fn therefore
// never runs concurrently with itself, may block (the library goes on: while
// fn lags, up to 1024 messages wait in the queue, later ones are dropped, and
// fn then receives a LogWarn message that counts them), and may call sluice
// (also SetLogLevel), but must not call SetLogCallback: that would wait for
// fn to return. A panic in fn is recovered, and the message is lost; after a
// runtime.Goexit in fn (t.FailNow) the messages taken out of the queue with
// that one are lost too, and a new goroutine goes on.
//
// SetLogCallback returns once the callback it replaces has been called with
// every message queued before the call and has returned; it is never called
// again. So SetLogCallback(nil) also waits until every message logged before
// it has been delivered. No Go pointer or cgo.Handle reaches the library:
// its receiver is a C function of this package with no user data, so a
// receiver call that overlapped the replacement could never use freed
// memory.
//
// The receiver is process-wide: C or C++ code of the same process that sets
// its own (sluice_log_set_callback) replaces this one until the next
// SetLogCallback call with a non-nil fn.
func SetLogCallback(fn func(level LogLevel, msg string)) error {
	logs.setMu.Lock()
	defer logs.setMu.Unlock()
	logs.mu.Lock()
	running := logs.running
	logs.mu.Unlock()
	if fn == nil {
		err := takeError(C.sluice_go_log_set_callback(false))
		if running {
			logs.drain()
			logs.setFn(nil)
			logs.stop()
		}
		return err
	}
	if !running {
		// No old callback: fn takes every message from the start.
		logs.setFn(fn)
		logs.start()
		if err := takeError(C.sluice_go_log_set_callback(true)); err != nil {
			logs.setFn(nil)
			logs.stop()
			return err
		}
		return nil
	}
	// Installed again, in case C code replaced the receiver meanwhile.
	err := takeError(C.sluice_go_log_set_callback(true))
	logs.drain()
	logs.setFn(fn)
	return err
}

// logState is the Go side of the log queue: the callback and the pump
// goroutine that calls it.
type logState struct {
	// setMu serialises SetLogCallback calls.
	setMu sync.Mutex

	// deliverMu is held while fn runs and while it is replaced, so that a
	// replaced callback has returned, and is not called again, once
	// SetLogCallback returns.
	deliverMu sync.Mutex
	fn        func(LogLevel, string)

	// mu guards the pump's state below; cond signals its changes.
	mu   sync.Mutex
	cond sync.Cond
	// running: a pump goroutine exists; stopping: it is asked to end.
	running, stopping bool
	// delivered is the seq of the last message the pump handled.
	delivered uint64
}

var logs logState

func init() { logs.cond.L = &logs.mu }

func (l *logState) setFn(fn func(LogLevel, string)) {
	l.deliverMu.Lock()
	l.fn = fn
	l.deliverMu.Unlock()
}

// start starts the pump goroutine; the caller holds setMu.
func (l *logState) start() {
	l.mu.Lock()
	l.running = true
	l.mu.Unlock()
	go l.pump()
}

// stop ends the pump goroutine (it first empties the queue) and waits for
// it; the caller holds setMu.
func (l *logState) stop() {
	l.mu.Lock()
	l.stopping = true
	l.mu.Unlock()
	C.sluice_go_log_wake()
	l.mu.Lock()
	for l.running {
		l.cond.Wait()
	}
	l.stopping = false
	l.mu.Unlock()
}

// drain waits until the pump handled every message queued before the call.
func (l *logState) drain() {
	n := uint64(C.sluice_go_log_queued())
	l.mu.Lock()
	for l.running && l.delivered < n {
		l.cond.Wait()
	}
	l.mu.Unlock()
}

// logBatch is the number of messages the pump takes out of the C queue at
// once.
const logBatch = 64

// pump takes the messages out of the C queue, in order, and calls the
// callback; it blocks in C while the queue is empty.
func (l *logState) pump() {
	// C memory, so that the texts it points to may stay there between two
	// takes (each take frees those of the previous one).
	buf := (*[logBatch]C.sluice_go_log_msg_t)(C.calloc(logBatch, C.sizeof_sluice_go_log_msg_t))
	var b C.sluice_go_log_batch_t
	stopped := false
	defer func() {
		for i := range buf {
			C.free(unsafe.Pointer(buf[i].text))
		}
		C.free(unsafe.Pointer(buf))
		if !stopped {
			// The callback called runtime.Goexit: the rest of its batch is
			// lost, and a new pump goes on.
			l.batchDone(b)
			go l.pump()
		}
	}()
	for {
		b = C.sluice_go_log_take(&buf[0], logBatch)
		for i := range int(b.n) {
			l.deliver(LogLevel(buf[i].level), C.GoString(buf[i].text))
		}
		if b.dropped != 0 {
			l.deliver(LogWarn, fmt.Sprintf("sluice: %d log messages dropped: the Go log callback fell behind (%d queued at most)", uint64(b.dropped), logQueueMessages))
		}
		if stopped = l.batchDone(b); stopped {
			return
		}
	}
}

// batchDone records that the pump handled batch b; it reports whether the
// pump is to end (b says the queue is empty and the pump was asked to stop).
func (l *logState) batchDone(b C.sluice_go_log_batch_t) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.n > 0 && uint64(b.last_seq) > l.delivered {
		l.delivered = uint64(b.last_seq)
		l.cond.Broadcast()
	}
	if bool(b.woken) && l.stopping {
		l.running = false
		l.cond.Broadcast()
		return true
	}
	return false
}

// deliver calls the callback, if any, recovering its panic.
func (l *logState) deliver(level LogLevel, msg string) {
	l.deliverMu.Lock()
	defer l.deliverMu.Unlock()
	if l.fn == nil {
		return
	}
	defer func() { _ = recover() }()
	l.fn(level, msg)
}

package sluice

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Traces, counters and logs are process-wide: the tests that change them hold
// obsMu (the package's tests do not call t.Parallel, but this keeps them
// apart should that change), and put back what they changed when they end, so
// other tests run with the settings of the environment.
var obsMu sync.Mutex

func observeTest(t *testing.T) {
	t.Helper()
	obsMu.Lock()
	// Registered first, so it runs last: after the test's streams are closed.
	t.Cleanup(func() {
		defer obsMu.Unlock()
		// The level first: nothing reaches stderr between the two.
		for _, err := range []error{
			TraceStop(),
			SetCountersEnabled(envFlag("SLUICE_COUNTERS")),
			SetLogLevel(envLogLevel()),
			SetLogCallback(nil),
		} {
			if err != nil {
				t.Errorf("restoring the settings: %v", err)
			}
		}
	})
}

// envFlag and envLogLevel read the environment as the library does.
func envFlag(name string) bool {
	switch os.Getenv(name) {
	case "1", "on", "true", "yes":
		return true
	}
	return false
}

func envLogLevel() LogLevel {
	switch os.Getenv("SLUICE_LOG") {
	case "error":
		return LogError
	case "warn":
		return LogWarn
	case "info":
		return LogInfo
	case "debug":
		return LogDebug
	}
	return LogOff
}

// traceEvent is one event of a trace; pointers tell a missing field.
type traceEvent struct {
	Ph   *string        `json:"ph"`
	Name *string        `json:"name"`
	Cat  string         `json:"cat"`
	Pid  *uint64        `json:"pid"`
	Tid  *uint64        `json:"tid"`
	Ts   *float64       `json:"ts"`
	Dur  *float64       `json:"dur"`
	ID   *uint64        `json:"id"`
	Args map[string]any `json:"args"`
}

// readTrace parses the trace at path. Unless stopped, the array may lack its
// closing bracket (a trace being written is a prefix); once stopped it must
// be complete.
func readTrace(t *testing.T, path string, stopped bool) []traceEvent {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	text := bytes.TrimSpace(data)
	if !bytes.HasPrefix(text, []byte("[")) {
		t.Fatalf("trace does not start with '[': %.80q", text)
	}
	if !stopped && !bytes.HasSuffix(text, []byte("]")) {
		text = append(text, "\n]"...)
	}
	var events []traceEvent
	if err := json.Unmarshal(text, &events); err != nil {
		t.Fatalf("trace (stopped %v) is not a JSON array of events: %v", stopped, err)
	}
	for i, e := range events {
		if e.Ph == nil || e.Name == nil || e.Pid == nil || e.Tid == nil || e.Ts == nil {
			t.Fatalf("event %d lacks a required field (ph, name, pid, tid, ts): %+v", i, e)
		}
		if (*e.Ph == "s" || *e.Ph == "f") && e.ID == nil {
			t.Fatalf("flow event %d has no id", i)
		}
		if *e.Ph == "X" && e.Dur == nil {
			t.Fatalf("span %d has no dur", i)
		}
	}
	return events
}

// trackOf returns the tid of the thread_name event whose name begins with
// label, and whether there is one.
func trackOf(events []traceEvent, label string) (uint64, bool) {
	for _, e := range events {
		if *e.Ph == "M" && *e.Name == "thread_name" {
			if name, _ := e.Args["name"].(string); strings.HasPrefix(name, label+" (stream #") {
				return *e.Tid, true
			}
		}
	}
	return 0, false
}

// flows returns the (start tid, end tid) of every wait arrow, and fails t
// unless each has exactly one start and one end.
func flows(t *testing.T, events []traceEvent) [][2]uint64 {
	t.Helper()
	type ends struct{ s, f []uint64 }
	byID := map[uint64]*ends{}
	var ids []uint64
	for _, e := range events {
		if *e.Ph != "s" && *e.Ph != "f" {
			continue
		}
		x := byID[*e.ID]
		if x == nil {
			x = &ends{}
			byID[*e.ID] = x
			ids = append(ids, *e.ID)
		}
		if *e.Ph == "s" {
			x.s = append(x.s, *e.Tid)
		} else {
			x.f = append(x.f, *e.Tid)
		}
	}
	var out [][2]uint64
	for _, id := range ids {
		x := byID[id]
		if len(x.s) != 1 || len(x.f) != 1 {
			t.Fatalf("flow %d has %d starts and %d ends", id, len(x.s), len(x.f))
		}
		out = append(out, [2]uint64{x.s[0], x.f[0]})
	}
	return out
}

// A two-stream pipeline, traced: a producer stream writes pinned memory from
// a slow host callback, a consumer stream copies it to the device, so the
// engine makes the consumer wait for the producer.
func TestTrace(t *testing.T) {
	if os.Getenv("SLUICE_TRACE") != "" {
		t.Skip("SLUICE_TRACE is set: a trace is already being written")
	}
	observeTest(t)
	must(t, TraceStop()) // none written: nothing to do
	must(t, TraceFlush())
	wantCode(t, TraceStart(""), ErrInvalidArgument)
	wantCode(t, TraceStart("a\x00b"), ErrInvalidArgument)
	err := TraceStart(filepath.Join(t.TempDir(), "no-such-dir", "trace.json"))
	wantCode(t, err, ErrInvalidArgument)
	if !strings.Contains(err.Error(), "no-such-dir") {
		t.Errorf("the error should name the path: %v", err)
	}

	d := openDev(t)
	prod, cons := testStream(t, d), testStream(t, d)
	must(t, prod.SetLabel("go-producer"))
	must(t, cons.SetLabel("go-consumer"))
	const n = 1 << 12
	pin := allocPinned(t, d, n)
	pb := pin.Bytes()
	x := alloc(t, cons, n)

	path := filepath.Join(t.TempDir(), "trace.json")
	must(t, TraceStart(path))
	wantCode(t, TraceStart(path), ErrInvalidState)
	c0, err := d.Counters()
	must(t, err)
	const rounds = 3
	for r := 0; r < rounds; r++ {
		must(t, prod.HostCallback(func() error {
			time.Sleep(10 * time.Millisecond)
			copy(pb, pattern(n, byte(r)))
			return nil
		}, nil, []Syncable{pin}))
		must(t, Copy(cons, x, 0, pin, 0, n)) // waits for the callback, on the device
		wantBytes(t, "traced pipeline", readBack(t, cons, x, n), pattern(n, byte(r)))
	}
	c1, err := d.Counters()
	must(t, err)
	// A trace counts what counting counts.
	if got := c1.BytesH2D - c0.BytesH2D; got != rounds*n {
		t.Errorf("bytes H2D while tracing: %d, want %d", got, rounds*n)
	}
	if got := c1.WaitsInserted - c0.WaitsInserted; got < rounds {
		t.Errorf("waits inserted while tracing: %d, want at least %d", got, rounds)
	}

	// Flushed but not stopped: a prefix of the array.
	must(t, TraceFlush())
	data, err := os.ReadFile(path)
	must(t, err)
	if bytes.HasSuffix(bytes.TrimSpace(data), []byte("]")) {
		t.Errorf("a trace being written should not be closed yet")
	}
	check := func(events []traceEvent) {
		t.Helper()
		pt, ok := trackOf(events, "go-producer")
		ct, ok2 := trackOf(events, "go-consumer")
		if !ok || !ok2 {
			t.Fatalf("no thread_name event per stream label (producer %v, consumer %v)", ok, ok2)
		}
		if pt != prod.ID() || ct != cons.ID() {
			t.Errorf("tracks %d and %d, want the stream ids %d and %d", pt, ct, prod.ID(), cons.ID())
		}
		arrows := 0
		for _, f := range flows(t, events) {
			if f == [2]uint64{pt, ct} {
				arrows++
			}
		}
		if arrows < rounds {
			t.Errorf("%d wait arrows from the producer to the consumer, want at least %d", arrows, rounds)
		}
		spans := map[string]int{}
		for _, e := range events {
			if *e.Ph == "X" && *e.Pid == 1 {
				spans[fmt.Sprintf("%s on %d", *e.Name, *e.Tid)]++
			}
		}
		if spans[fmt.Sprintf("host fn on %d", pt)] < rounds || spans[fmt.Sprintf("copy H2D on %d", ct)] < rounds {
			t.Errorf("missing op spans: %v", spans)
		}
	}
	check(readTrace(t, path, false))

	must(t, TraceStop())
	must(t, TraceStop()) // twice is fine
	events := readTrace(t, path, true)
	check(events)
	if data, _ := os.ReadFile(path); !bytes.HasSuffix(data, []byte("]\n")) {
		t.Errorf("a stopped trace should end with the closing bracket")
	}

	// After the stop, ops write nothing more; a new trace may start.
	size := fileSize(t, path)
	must(t, Copy(cons, x, 0, pin, 0, n))
	must(t, cons.Synchronize())
	must(t, TraceFlush())
	if got := fileSize(t, path); got != size {
		t.Errorf("the stopped trace grew from %d to %d bytes", size, got)
	}
	path2 := filepath.Join(t.TempDir(), "again.json")
	must(t, TraceStart(path2))
	must(t, TraceStop())
	readTrace(t, path2, true)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	must(t, err)
	return st.Size()
}

// The counters of a scripted sequence change by exact amounts.
func TestCounters(t *testing.T) {
	if os.Getenv("SLUICE_TRACE") != "" {
		t.Skip("SLUICE_TRACE is set: a trace counts whatever SetCountersEnabled says")
	}
	observeTest(t)
	_, err := ProcessCounters()
	must(t, err)
	forged := &Device{}
	forged.h.bits.Store(0x1234)
	_, err = forged.Counters()
	wantCode(t, err, ErrInvalidHandle)
	closed, err := OpenDefaultDevice()
	must(t, err)
	must(t, closed.Close())
	_, err = closed.Counters()
	wantClosed(t, err)

	d := openDev(t)
	must(t, SetCountersEnabled(true))
	a, b := testStream(t, d), testStream(t, d)
	const n = 4096
	x := alloc(t, a, n)
	p := allocPinned(t, d, n)
	y := alloc(t, a, 1000)
	delta := func(before Counters) Counters {
		t.Helper()
		after, err := d.Counters()
		must(t, err)
		return Counters{
			WaitsInserted:          after.WaitsInserted - before.WaitsInserted,
			WaitsDeduplicated:      after.WaitsDeduplicated - before.WaitsDeduplicated,
			WaitsSkippedSameStream: after.WaitsSkippedSameStream - before.WaitsSkippedSameStream,
			EventsRecorded:         after.EventsRecorded - before.EventsRecorded,
			BytesH2D:               after.BytesH2D - before.BytesH2D,
			BytesD2H:               after.BytesD2H - before.BytesD2H,
			BytesD2D:               after.BytesD2D - before.BytesD2D,
			BytesH2H:               after.BytesH2H - before.BytesH2H,
		}
	}
	c0, err := d.Counters()
	must(t, err)
	if c0.Streams < 2 {
		t.Errorf("%d live streams, want at least 2", c0.Streams)
	}
	must(t, Copy(a, x, 0, p, 0, n)) // H2D, no wait
	must(t, Copy(b, p, 0, x, 0, n)) // D2H: one wait (x and p were used by a's one op), one merged
	must(t, Copy(a, x, 0, p, 0, n)) // one wait, one merged, one covered by a's order
	want := Counters{
		WaitsInserted:          2,
		WaitsDeduplicated:      2,
		WaitsSkippedSameStream: 1,
		EventsRecorded:         3,
		BytesH2D:               2 * n,
		BytesD2H:               n,
	}
	if got := delta(c0); got != want {
		t.Errorf("scripted copies between buffers:\n got %+v\nwant %+v", got, want)
	}

	// Copies from and to Go memory count too.
	c1, err := d.Counters()
	must(t, err)
	must(t, CopyFromHost(a, y, 0, pattern(1000, 3)))
	wantBytes(t, "counted copies", readBack(t, a, y, 500), pattern(500, 3))
	if got := delta(c1); got.BytesH2D != 1000 || got.BytesD2H != 500 || got.WaitsInserted != 0 || got.EventsRecorded != 2 {
		t.Errorf("copies from and to Go memory: %+v", got)
	}

	// Off: bytes are no longer counted, events still are.
	must(t, SetCountersEnabled(false))
	c2, err := d.Counters()
	must(t, err)
	must(t, Copy(a, x, 0, p, 0, n))
	if got := delta(c2); got.BytesH2D != 0 || got.EventsRecorded != 1 {
		t.Errorf("counting off: %+v", got)
	}
	must(t, a.Synchronize())
	must(t, b.Synchronize())
	c3, err := d.Counters()
	must(t, err)
	pc, err := ProcessCounters()
	must(t, err)
	if pc.BytesH2D < c3.BytesH2D || pc.EventsRecorded < c3.EventsRecorded || pc.Streams < c3.Streams {
		t.Errorf("process counters %+v below the device's %+v", pc, c3)
	}

	// A closed stream still counts in its device's totals.
	must(t, b.Close())
	c4, err := d.Counters()
	must(t, err)
	if c4.BytesD2H < c3.BytesD2H || c4.WaitsInserted < c3.WaitsInserted || c4.EventsRecorded < c3.EventsRecorded {
		t.Errorf("closing a stream lost its counts: %+v, then %+v", c3, c4)
	}
}

type logMsg struct {
	level LogLevel
	msg   string
}

// logCollector is a log callback that keeps what it receives.
type logCollector struct {
	mu   sync.Mutex
	msgs []logMsg
}

func (c *logCollector) fn(level LogLevel, msg string) {
	c.mu.Lock()
	c.msgs = append(c.msgs, logMsg{level, msg})
	c.mu.Unlock()
}

// count returns how many messages of level contain substr.
func (c *logCollector) count(level LogLevel, substr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for _, m := range c.msgs {
		if m.level == level && strings.Contains(m.msg, substr) {
			k++
		}
	}
	return k
}

func (c *logCollector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

// staleStream returns a Stream wrapper whose handle was destroyed: the
// library rejects it (and logs that at debug level), the Go side does not
// know it is closed.
func staleStream(t *testing.T, d *Device) (*Stream, uint64) {
	t.Helper()
	s, err := d.NewStream(0, 0)
	must(t, err)
	bits := s.h.bits.Load()
	must(t, s.Close())
	stale := &Stream{dev: d}
	stale.h.bits.Store(bits)
	return stale, bits
}

func TestLogCallback(t *testing.T) {
	observeTest(t)
	for l, name := range map[LogLevel]string{LogOff: "off", LogError: "error", LogWarn: "warn", LogInfo: "info", LogDebug: "debug", 9: "level(9)"} {
		if l.String() != name {
			t.Errorf("LogLevel(%d).String() = %q", uint32(l), l.String())
		}
	}
	wantCode(t, SetLogLevel(LogDebug+1), ErrInvalidArgument)

	d := openDev(t)
	stale, bits := staleStream(t, d)
	staleMsg := fmt.Sprintf("stale handle used: stream handle 0x%016x is stale", bits)
	c := &logCollector{}
	// The callback may call sluice: it runs on a goroutine of the package,
	// not on the thread that logs.
	var calls atomic.Int64
	cb := func(level LogLevel, msg string) {
		if _, err := ProcessCounters(); err != nil {
			msg += fmt.Sprintf(" (ProcessCounters: %v)", err)
		}
		calls.Add(1)
		c.fn(level, msg)
	}
	must(t, SetLogCallback(cb))
	// Replacing a callback (here by itself) first delivers what was logged
	// before to the old one: a flush.
	flush := func() {
		t.Helper()
		must(t, SetLogCallback(cb))
	}

	// Off: nothing is logged.
	must(t, SetLogLevel(LogOff))
	wantCode(t, stale.Synchronize(), ErrInvalidHandle)
	flush()
	if c.len() != 0 {
		t.Fatalf("logging off, yet the callback got %v", c.msgs)
	}

	// Debug: a stale handle, also inside a function cgo calls with
	// `#cgo nocallback` (sluice_stream_query): the C receiver only queues it.
	must(t, SetLogLevel(LogDebug))
	wantCode(t, stale.Synchronize(), ErrInvalidHandle)
	_, err := stale.Query()
	wantCode(t, err, ErrInvalidHandle)
	flush()
	if got := c.count(LogDebug, staleMsg); got != 2 {
		t.Fatalf("debug: %d messages %q, want 2; got %v", got, staleMsg, c.msgs)
	}
	if calls.Load() != 2 {
		t.Fatalf("the callback was called %d times, want 2", calls.Load())
	}
	if strings.Contains(fmt.Sprint(c.msgs), "ProcessCounters:") {
		t.Fatalf("sluice called from the log callback failed: %v", c.msgs)
	}

	// Warn: no debug messages, but a capture poisoned by a host sync.
	must(t, SetLogLevel(LogWarn))
	_, err = stale.Query()
	wantCode(t, err, ErrInvalidHandle)
	s := testStream(t, d)
	must(t, s.BeginCapture(CaptureRelaxed))
	wantCode(t, s.Synchronize(), ErrCaptureUnsupported)
	_, err = s.EndCapture()
	wantCode(t, err, ErrCaptureFailed)
	flush()
	if got := c.count(LogDebug, staleMsg); got != 2 {
		t.Errorf("warn level let a debug message through (%d)", got)
	}
	if c.count(LogWarn, "poisoned") != 1 {
		t.Errorf("warn: no message for the poisoned capture: %v", c.msgs)
	}

	// Info: traces started and stopped.
	if os.Getenv("SLUICE_TRACE") == "" {
		must(t, SetLogLevel(LogInfo))
		path := filepath.Join(t.TempDir(), "logged.json")
		must(t, TraceStart(path))
		must(t, TraceStop())
		flush()
		if c.count(LogInfo, "trace started: "+path) != 1 || c.count(LogInfo, "trace stopped: "+path) != 1 {
			t.Errorf("info: no messages for the trace: %v", c.msgs)
		}
	}

	// Back to stderr (level off, to keep the test quiet): the callback gets
	// nothing more.
	must(t, SetLogCallback(nil))
	must(t, SetLogCallback(nil)) // twice is fine
	must(t, SetLogLevel(LogOff))
	before := c.len()
	wantCode(t, stale.Synchronize(), ErrInvalidHandle)
	if c.len() != before {
		t.Errorf("a removed callback was called")
	}
}

var droppedRe = regexp.MustCompile(`^sluice: (\d+) log messages dropped`)

// Messages logged on many threads at once, while the callback is replaced
// again and again: every message reaches exactly one callback, or is
// counted as dropped, and a replaced callback is never called again.
func TestLogCallbackReplacedUnderLoad(t *testing.T) {
	observeTest(t)
	d := openDev(t)
	stale, _ := staleStream(t, d)
	must(t, SetLogLevel(LogDebug))
	const loggers = 8
	each := int(debugScaled(1500, 150))
	var delivered, dropped, late atomic.Int64
	newCallback := func() (func(LogLevel, string), *atomic.Bool) {
		retired := &atomic.Bool{}
		return func(level LogLevel, msg string) {
			if retired.Load() {
				late.Add(1)
			}
			if m := droppedRe.FindStringSubmatch(msg); m != nil {
				k, _ := strconv.Atoi(m[1])
				dropped.Add(int64(k))
			} else if strings.Contains(msg, "stale handle used") {
				delivered.Add(1)
			}
		}, retired
	}
	fn, retired := newCallback()
	must(t, SetLogCallback(fn))
	var wg sync.WaitGroup
	var errs atomic.Int64
	for g := 0; g < loggers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var err error
				if i%2 == 0 {
					_, err = stale.Query() // sluice_stream_query is nocallback
				} else {
					err = stale.Synchronize()
				}
				if !errors.Is(err, ErrInvalidHandle) {
					errs.Add(1)
				}
				if i%8 == 7 {
					time.Sleep(20 * time.Microsecond)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	replacements := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(50 * time.Microsecond):
		}
		next, nextRetired := newCallback()
		must(t, SetLogCallback(next))
		retired.Store(true) // SetLogCallback returned: the old one is done
		retired = nextRetired
		replacements++
	}
	must(t, SetLogCallback(nil))
	if errs.Load() != 0 {
		t.Fatalf("%d stale calls did not fail with ErrInvalidHandle", errs.Load())
	}
	if late.Load() != 0 {
		t.Errorf("replaced callbacks were called %d times", late.Load())
	}
	if got := delivered.Load() + dropped.Load(); got != int64(loggers*each) {
		t.Errorf("%d messages delivered and %d dropped, want %d in all", delivered.Load(), dropped.Load(), loggers*each)
	}
	t.Logf("%d replacements, %d messages delivered, %d dropped", replacements, delivered.Load(), dropped.Load())
}

// A slow callback makes the queue overflow: the library does not wait for
// it, and the callback learns how many messages were lost.
func TestLogCallbackSlow(t *testing.T) {
	observeTest(t)
	d := openDev(t)
	stale, _ := staleStream(t, d)
	must(t, SetLogLevel(LogDebug))
	release := make(chan struct{})
	var delivered, dropped atomic.Int64
	must(t, SetLogCallback(func(level LogLevel, msg string) {
		<-release
		if m := droppedRe.FindStringSubmatch(msg); m != nil {
			if level != LogWarn {
				t.Errorf("the drop report is at level %v", level)
			}
			k, _ := strconv.Atoi(m[1])
			dropped.Add(int64(k))
		} else {
			delivered.Add(1)
		}
	}))
	const total = 2 * logQueueMessages
	start := time.Now()
	for i := 0; i < total; i++ {
		_, err := stale.Query()
		wantCode(t, err, ErrInvalidHandle)
	}
	// With the sluice_debug tag every call forces a GC, which alone takes
	// seconds for these calls on a loaded machine; a blocked wait would hang.
	limit := 5 * time.Second
	if debugGC {
		limit = 60 * time.Second
	}
	if el := time.Since(start); el > limit {
		t.Errorf("logging waited for a blocked callback: %v", el)
	}
	close(release)
	must(t, SetLogCallback(nil))
	if dropped.Load() == 0 || delivered.Load()+dropped.Load() != total {
		t.Errorf("%d delivered, %d dropped, want %d in all with some dropped", delivered.Load(), dropped.Load(), total)
	}
}

// A callback that panics or calls runtime.Goexit loses its message, and
// later messages still arrive.
func TestLogCallbackPanics(t *testing.T) {
	observeTest(t)
	d := openDev(t)
	stale, _ := staleStream(t, d)
	must(t, SetLogLevel(LogDebug))
	var calls atomic.Int64
	cb := func(level LogLevel, msg string) {
		switch calls.Add(1) {
		case 1:
			panic("a log callback panics")
		case 2:
			runtime.Goexit()
		}
	}
	must(t, SetLogCallback(cb))
	for i := 1; i <= 4; i++ {
		wantCode(t, stale.Synchronize(), ErrInvalidHandle)
		// One message at a time: setting the callback again returns once it
		// got what was logged before.
		must(t, SetLogCallback(cb))
		if got := calls.Load(); got != int64(i) {
			t.Fatalf("after message %d, %d calls", i, got)
		}
	}
	must(t, SetLogCallback(nil))
}

// Traces, counters and logs change no result: the same pipeline gives the
// same bytes with all of them off and all of them on.
func TestObservingChangesNoResult(t *testing.T) {
	observeTest(t)
	// Each run is a subtest, so that its objects are closed (which may log)
	// before the settings change.
	run := func(name string) (out []byte) {
		t.Run(name, func(t *testing.T) { out = pipeline(t) })
		return out
	}
	plain := run("plain")
	want := pattern(1<<13, 3)
	copy(want[3:], repeat(0xa3, 64))
	wantBytes(t, "plain", plain, want)

	c := &logCollector{}
	must(t, SetLogLevel(LogDebug))
	must(t, SetLogCallback(c.fn))
	must(t, SetCountersEnabled(true))
	if os.Getenv("SLUICE_TRACE") == "" {
		must(t, TraceStart(filepath.Join(t.TempDir(), "result.json")))
	}
	observed := run("observed")
	must(t, TraceStop())
	must(t, SetLogLevel(LogOff))
	must(t, SetLogCallback(nil))
	wantBytes(t, "observed", observed, plain)
	if c.count(LogDebug, "stale handle used") != 4 {
		t.Errorf("the observed run logged %d stale handles, want 4", c.count(LogDebug, "stale handle used"))
	}
}

// pipeline runs a two-stream pipeline and returns its result.
func pipeline(t *testing.T) []byte {
	d := openDev(t)
	a, b := testStream(t, d), testStream(t, d)
	must(t, a.SetLabel("a"))
	must(t, b.SetLabel("b"))
	const n = 1 << 13
	pin := allocPinned(t, d, n)
	pb := pin.Bytes()
	x, y := alloc(t, a, n), alloc(t, b, n)
	stale, _ := staleStream(t, d)
	for r := 0; r < 4; r++ {
		must(t, a.HostCallback(func() error {
			time.Sleep(2 * time.Millisecond)
			copy(pb, pattern(n, byte(r)))
			return nil
		}, nil, []Syncable{pin}))
		must(t, Copy(b, y, 0, pin, 0, n))
		must(t, Memset(b, y, r, 0xa0+byte(r), 64))
		must(t, Copy(a, x, 0, y, 0, n))
		wantCode(t, stale.Synchronize(), ErrInvalidHandle)
	}
	return readBack(t, a, x, n)
}

package sluice

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

var allSentinels = []*Error{
	ErrPanic, ErrNullArgument, ErrInvalidArgument, ErrInvalidHandle, ErrOutOfRange,
	ErrUnsupported, ErrNoDriver, ErrNoDevice, ErrDriver, ErrOutOfMemory,
	ErrCaptureUnsupported, ErrCaptureFailed, ErrDeviceFault, ErrCallbackFailed,
	ErrModuleLoad, ErrNotFound, ErrWrongDevice, ErrInvalidState, ErrEndOfData,
	ErrTimeout, ErrCorruptData, ErrCompile,
}

func TestErrorsIsEveryCode(t *testing.T) {
	if len(allSentinels) != int(CodeCompile) {
		t.Fatalf("%d sentinels for %d codes", len(allSentinels), CodeCompile)
	}
	for i, s := range allSentinels {
		if s.Code != ErrorCode(i+1) {
			t.Fatalf("sentinel %d has code %d", i, s.Code)
		}
		name := s.Code.String()
		if !strings.HasPrefix(name, "SLUICE_ERROR_") || name == "SLUICE_ERROR_UNKNOWN" {
			t.Errorf("code %d has name %q", s.Code, name)
		}
		err := error(&Error{Code: s.Code, Message: "boom"})
		wrapped := fmt.Errorf("context: %w", err)
		for _, other := range allSentinels {
			if got, want := errors.Is(wrapped, other), other.Code == s.Code; got != want {
				t.Errorf("errors.Is(%v, %v) = %v", s.Code, other.Code, got)
			}
		}
		if errors.Is(err, ErrClosed) {
			t.Errorf("%v matches ErrClosed", s.Code)
		}
		var se *Error
		if !errors.As(wrapped, &se) || se.Code != s.Code {
			t.Errorf("errors.As failed for %v", s.Code)
		}
	}
	if got := ErrorCode(999).String(); got != "SLUICE_ERROR_UNKNOWN" {
		t.Errorf("unknown code name %q", got)
	}
}

func TestErrorsFromC(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	buf := alloc(t, s, 64)

	// Each of these errors comes from the library (not from Go checks).
	_, err := OpenDevice(BackendHost, 99)
	wantCode(t, err, ErrNoDevice)

	_, err = s.Alloc(0)
	wantCode(t, err, ErrInvalidArgument)
	if se := err.(*Error); !strings.Contains(se.Message, "sluice_buffer_alloc") || se.DriverCode != 0 {
		t.Errorf("message %q, driver code %d", se.Message, se.DriverCode)
	}
	_, err = d.NewStream(0x80, 0)
	wantCode(t, err, ErrInvalidArgument)
	wantCode(t, SetEngineMode(7), ErrInvalidArgument)
	_, err = s.Record(0x40)
	wantCode(t, err, ErrInvalidArgument)

	wantCode(t, CopyFromHost(s, buf, 60, make([]byte, 8)), ErrOutOfRange)
	wantCode(t, CopyToHost(s, make([]byte, 65), buf, 0), ErrOutOfRange)
	wantCode(t, Memset(s, buf, 64, 0, 1), ErrOutOfRange)
	wantCode(t, Copy(s, buf, 0, buf, 8, 16), ErrInvalidArgument) // overlap

	_, err = d.RegisterHost(nil, 16)
	wantCode(t, err, ErrNullArgument)

	// A forged handle: the library reports it, never crashes.
	forged := &Stream{dev: d}
	forged.h.bits.Store(0x1234_5678_9abc)
	err = forged.Synchronize()
	wantCode(t, err, ErrInvalidHandle)
	if errors.Is(err, ErrClosed) {
		t.Errorf("a forged handle is not a closed one: %v", err)
	}

	// Wrong device: host device 1 is always there (TestMain sets SLUICE_HOST_DEVICES=2).
	if os.Getenv("SLUICE_HOST_DEVICES") == "2" {
		d1, err := OpenDevice(BackendHost, 1)
		must(t, err)
		defer d1.Close()
		p1, err := d1.AllocPinned(64)
		must(t, err)
		defer p1.Close()
		wantCode(t, Copy(s, buf, 0, p1, 0, 64), ErrWrongDevice)
	}

	// Backend-specific codes.
	switch backendOf(t, d) {
	case BackendHost:
		_, err = d.LoadModule([]byte(scalePTX))
		wantCode(t, err, ErrUnsupported)
		if !strings.Contains(err.Error(), "host") {
			t.Errorf("unsupported message should name the backend: %v", err)
		}
	case BackendCUDA:
		_, err = d.LoadModule([]byte("this is not ptx\x00"))
		if !errors.Is(err, ErrModuleLoad) && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("bad module: %v", err)
		}
	}
	if _, err := DeviceCount(BackendCUDA); err != nil {
		wantCode(t, err, ErrNoDriver)
	}

	// Invalid state: the elapsed time of a timing event that has not completed.
	if backendOf(t, d) == BackendHost {
		release := make(chan struct{})
		start, err := s.Record(EventTiming)
		must(t, err)
		defer start.Close()
		must(t, s.HostCallback(func() error { <-release; return nil }, nil, nil))
		end, err := s.Record(EventTiming)
		must(t, err)
		defer end.Close()
		_, err = ElapsedTime(start, end)
		close(release)
		wantCode(t, err, ErrInvalidState)
		must(t, s.Synchronize())
	}
}

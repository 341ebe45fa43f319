package sluice

/*
#include "sluice.h"
*/
import "C"

import (
	"errors"
	"fmt"
)

// ErrorCode is a stable sluice error code (SLUICE_ERROR_*). Codes are never
// renumbered.
type ErrorCode uint32

// The error codes of sluice.h.
const (
	CodePanic              ErrorCode = C.SLUICE_ERROR_PANIC
	CodeNullArgument       ErrorCode = C.SLUICE_ERROR_NULL_ARGUMENT
	CodeInvalidArgument    ErrorCode = C.SLUICE_ERROR_INVALID_ARGUMENT
	CodeInvalidHandle      ErrorCode = C.SLUICE_ERROR_INVALID_HANDLE
	CodeOutOfRange         ErrorCode = C.SLUICE_ERROR_OUT_OF_RANGE
	CodeUnsupported        ErrorCode = C.SLUICE_ERROR_UNSUPPORTED
	CodeNoDriver           ErrorCode = C.SLUICE_ERROR_NO_DRIVER
	CodeNoDevice           ErrorCode = C.SLUICE_ERROR_NO_DEVICE
	CodeDriver             ErrorCode = C.SLUICE_ERROR_DRIVER
	CodeOutOfMemory        ErrorCode = C.SLUICE_ERROR_OUT_OF_MEMORY
	CodeCaptureUnsupported ErrorCode = C.SLUICE_ERROR_CAPTURE_UNSUPPORTED
	CodeCaptureFailed      ErrorCode = C.SLUICE_ERROR_CAPTURE_FAILED
	CodeDeviceFault        ErrorCode = C.SLUICE_ERROR_DEVICE_FAULT
	CodeCallbackFailed     ErrorCode = C.SLUICE_ERROR_CALLBACK_FAILED
	CodeModuleLoad         ErrorCode = C.SLUICE_ERROR_MODULE_LOAD
	CodeNotFound           ErrorCode = C.SLUICE_ERROR_NOT_FOUND
	CodeWrongDevice        ErrorCode = C.SLUICE_ERROR_WRONG_DEVICE
	CodeInvalidState       ErrorCode = C.SLUICE_ERROR_INVALID_STATE
	CodeEndOfData          ErrorCode = C.SLUICE_ERROR_END_OF_DATA
	CodeTimeout            ErrorCode = C.SLUICE_ERROR_TIMEOUT
	CodeCorruptData        ErrorCode = C.SLUICE_ERROR_CORRUPT_DATA
	CodeCompile            ErrorCode = C.SLUICE_ERROR_COMPILE
)

// String gives the constant name of the code, for example
// "SLUICE_ERROR_INVALID_HANDLE" (from sluice_error_code_name; the string is
// static in the library).
func (c ErrorCode) String() string {
	return C.GoString(C.sluice_error_code_name(C.uint32_t(c)))
}

// Error is an error reported by sluice. Every fallible function of this
// package returns either nil or an error that errors.As finds as *Error.
//
// Two *Error values match under errors.Is when their codes are equal, so
//
//	errors.Is(err, sluice.ErrInvalidHandle)
//
// tests for SLUICE_ERROR_INVALID_HANDLE whatever the message.
type Error struct {
	// Code is the stable error code.
	Code ErrorCode
	// Message names the failed operation and the handle; it is copied out of
	// the C error object, which is freed at once.
	Message string
	// DriverCode is the CUDA driver's CUresult behind the error, or 0.
	DriverCode uint32
	// Cause is the Go-side cause: for CodeCallbackFailed, the error the Go
	// callback returned or a *CallbackPanicError; nil otherwise.
	Cause error

	closed bool
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Message == "" {
		return "sluice: " + e.Code.String()
	}
	s := e.Message
	if e.DriverCode != 0 {
		s += fmt.Sprintf(" (CUresult %d)", e.DriverCode)
	}
	return s + " [" + e.Code.String() + "]"
}

// Is reports whether target is an *Error with the same code, or ErrClosed
// when e reports the use of a closed handle.
func (e *Error) Is(target error) bool {
	if target == ErrClosed {
		return e.closed
	}
	t, ok := target.(*Error)
	return ok && t != nil && t.Code == e.Code
}

// Unwrap returns the Go-side cause (see Cause).
func (e *Error) Unwrap() error { return e.Cause }

// ErrClosed matches (with errors.Is) every error returned for the use of a
// wrapper after its Close. Such an error is also an *Error with
// CodeInvalidHandle, so it matches ErrInvalidHandle too.
var ErrClosed = errors.New("sluice: use of a closed handle")

func sentinel(c ErrorCode) *Error { return &Error{Code: c} }

// Sentinels, one per code, for errors.Is.
var (
	ErrPanic              = sentinel(CodePanic)
	ErrNullArgument       = sentinel(CodeNullArgument)
	ErrInvalidArgument    = sentinel(CodeInvalidArgument)
	ErrInvalidHandle      = sentinel(CodeInvalidHandle)
	ErrOutOfRange         = sentinel(CodeOutOfRange)
	ErrUnsupported        = sentinel(CodeUnsupported)
	ErrNoDriver           = sentinel(CodeNoDriver)
	ErrNoDevice           = sentinel(CodeNoDevice)
	ErrDriver             = sentinel(CodeDriver)
	ErrOutOfMemory        = sentinel(CodeOutOfMemory)
	ErrCaptureUnsupported = sentinel(CodeCaptureUnsupported)
	ErrCaptureFailed      = sentinel(CodeCaptureFailed)
	ErrDeviceFault        = sentinel(CodeDeviceFault)
	ErrCallbackFailed     = sentinel(CodeCallbackFailed)
	ErrModuleLoad         = sentinel(CodeModuleLoad)
	ErrNotFound           = sentinel(CodeNotFound)
	ErrWrongDevice        = sentinel(CodeWrongDevice)
	ErrInvalidState       = sentinel(CodeInvalidState)
	ErrEndOfData          = sentinel(CodeEndOfData)
	ErrTimeout            = sentinel(CodeTimeout)
	ErrCorruptData        = sentinel(CodeCorruptData)
	ErrCompile            = sentinel(CodeCompile)
)

// takeError converts a C error into an *Error, copying everything into Go
// memory, and frees the C error. NULL gives nil.
func takeError(e *C.sluice_error_t) error {
	if e == nil {
		return nil
	}
	err := &Error{
		Code:       ErrorCode(C.sluice_error_code(e)),
		Message:    C.GoString(C.sluice_error_message(e)),
		DriverCode: uint32(C.sluice_error_driver_code(e)),
	}
	C.sluice_error_free(e)
	if err.Code == CodeCallbackFailed {
		attachCallbackFailure(err)
	}
	return err
}

// dropError frees a C error that the caller has no one to report to (a
// cleanup, the replaced recording of a reused wrapper). NULL, the common
// case, costs no cgo call.
func dropError(e *C.sluice_error_t) {
	if e != nil {
		C.sluice_error_free(e)
	}
}

// argError is an error found by the Go binding before calling C.
func argError(code ErrorCode, op, format string, args ...any) error {
	return &Error{Code: code, Message: "sluice: " + op + ": " + fmt.Sprintf(format, args...)}
}

func closedError(op string) error {
	return &Error{Code: CodeInvalidHandle, Message: "sluice: " + op + ": handle is closed", closed: true}
}

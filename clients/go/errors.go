package spillway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrProtocol is wrapped by every error about a malformed or unexpected
// response: errors.Is(err, ErrProtocol). The connection is unusable after
// one (the byte stream can no longer be trusted); reconnect.
var ErrProtocol = errors.New("spillway: protocol error")

// ErrClosed is wrapped by every error that means the connection is gone:
// the daemon closed it (end of file, reset, broken pipe), it was closed
// locally, or an earlier failure left it unusable. Reconnect.
var ErrClosed = errors.New("spillway: connection closed")

// ProtocolError is a malformed or unexpected response. errors.Is(err,
// ErrProtocol) is true; when the daemon closed the connection in the middle
// of a frame, errors.Is(err, ErrClosed) is true as well.
type ProtocolError struct {
	Msg string
	// MidFrame is set when the connection ended inside a frame.
	MidFrame bool
}

func (e *ProtocolError) Error() string { return "spillway: protocol error: " + e.Msg }

// Is makes errors.Is(err, ErrProtocol) (and, mid-frame, ErrClosed) true.
func (e *ProtocolError) Is(target error) bool {
	return target == ErrProtocol || (e.MidFrame && target == ErrClosed)
}

func protocolErrorf(format string, args ...interface{}) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// NackError is the daemon's refusal of a request. Use errors.As to get it.
type NackError struct {
	Reason NackReason
	// Byte is the reason's byte on the wire (the same value as Reason).
	Byte byte
	// DaemonVersion is the daemon's protocol version, for VersionMismatch.
	DaemonVersion uint8
}

func newNackError(r Response) *NackError {
	return &NackError{Reason: r.Reason, Byte: byte(r.Reason), DaemonVersion: r.DaemonVersion}
}

// Retryable reports whether the same request may be resent on the same
// connection after a back-off: true for InternalError and Overloaded only.
func (e *NackError) Retryable() bool { return e.Reason.Retryable() }

// ClosesConnection reports whether the daemon closed the connection after
// this nack (every reason that is not retryable).
func (e *NackError) ClosesConnection() bool { return e.Reason.ClosesConnection() }

func (e *NackError) Error() string {
	if e.Retryable() {
		return fmt.Sprintf("spillway: daemon nacked: %s (0x%02x, retryable: back off and resend)", e.Reason, e.Byte)
	}
	extra := ""
	if e.Reason == VersionMismatch && e.DaemonVersion != 0 {
		extra = fmt.Sprintf(", daemon speaks version %d", e.DaemonVersion)
	}
	return fmt.Sprintf("spillway: daemon nacked: %s (0x%02x%s, not retryable: the daemon closed the connection; a client bug or a version mismatch, do not resend)", e.Reason, e.Byte, extra)
}

// RecordError is a request refused locally, before any byte was sent: an
// empty record, a batch with no records, a payload over
// Options.PayloadBytesMax, or an unknown tier. The connection is unaffected.
type RecordError struct {
	// Index is the record's index (0 for a Push, its position in a batch),
	// or -1 when the fault is the request as a whole (no records, bad tier).
	Index int
	// Len is the record's length, or the payload length when Limit is set.
	Len int
	// Limit is the payload_bytes_max that was exceeded (0 otherwise).
	Limit int
	Msg   string
}

func (e *RecordError) Error() string {
	return "spillway: refused locally, nothing sent: " + e.Msg
}

// TimeoutError is a read or write that did not finish in time: the read or
// write timeout of Options, or the deadline of the call's context. It
// satisfies net.Error with Timeout() == true, and errors.Is(err,
// os.ErrDeadlineExceeded) and errors.Is(err, context.DeadlineExceeded) are
// both true.
type TimeoutError struct {
	Op string
	// After is the timeout that expired (0 when it was the context's deadline).
	After time.Duration
}

func (e *TimeoutError) Error() string {
	if e.After > 0 {
		return fmt.Sprintf("spillway: %s: timed out after %v", e.Op, e.After)
	}
	return fmt.Sprintf("spillway: %s: context deadline exceeded", e.Op)
}

// Timeout is always true (net.Error).
func (e *TimeoutError) Timeout() bool { return true }

// Temporary is always true (net.Error).
func (e *TimeoutError) Temporary() bool { return true }

// Is makes errors.Is true for os.ErrDeadlineExceeded and context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool {
	return target == os.ErrDeadlineExceeded || target == context.DeadlineExceeded
}

// closedError says why the connection is gone; errors.Is(err, ErrClosed).
type closedError struct {
	why   string
	cause error
}

func (e *closedError) Error() string {
	s := "spillway: connection closed: " + e.why
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}

func (e *closedError) Is(target error) bool { return target == ErrClosed }
func (e *closedError) Unwrap() error        { return e.cause }

// ctxError is the error for an operation stopped by its context.
func ctxError(op string, ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &TimeoutError{Op: op}
	}
	return fmt.Errorf("spillway: %s: %w", op, ctx.Err())
}

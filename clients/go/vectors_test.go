package spillway_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	spillway "github.com/spillway-rs/spillway/clients/go"
)

// hexBytes is a byte string stored as lowercase hex in vectors.json.
type hexBytes []byte

func (h *hexBytes) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := hex.DecodeString(s)
	*h = v
	return err
}

type vector struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Description string   `json:"description"`
	Frame       hexBytes `json:"frame"`
	Answer      hexBytes `json:"answer"`
	Request     *struct {
		Type    string     `json:"type"`
		Tier    string     `json:"tier"`
		Payload hexBytes   `json:"payload"`
		Records []hexBytes `json:"records"`
	} `json:"request"`
	Response *struct {
		Type             string `json:"type"`
		Count            *uint32
		Reason           string `json:"reason"`
		ReasonByte       *int   `json:"reason_byte"`
		Retryable        *bool  `json:"retryable"`
		ClosesConnection *bool  `json:"closes_connection"`
		DaemonVersion    *int   `json:"daemon_version"`
	} `json:"response"`
	Nack *struct {
		Reason     string `json:"reason"`
		ReasonByte int    `json:"reason_byte"`
	} `json:"nack"`
	ClosesConnection *bool  `json:"closes_connection"`
	Fault            string `json:"fault"`
}

type vectorFile struct {
	Format              int      `json:"format"`
	ProtocolVersion     int      `json:"protocol_version"`
	PayloadBytesHardMax int      `json:"payload_bytes_hard_max"`
	Vectors             []vector `json:"vectors"`
}

// loadVectors reads protocol/conformance/vectors.json from the repository,
// found relative to this test file.
func loadVectors(t *testing.T) vectorFile {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	path := filepath.Join(filepath.Dir(file), "..", "..", "protocol", "conformance", "vectors.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the conformance vectors: %v", err)
	}
	var vf vectorFile
	if err := json.Unmarshal(data, &vf); err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	if vf.Format != 1 || vf.ProtocolVersion != 1 || vf.PayloadBytesHardMax != spillway.PayloadBytesHardMax {
		t.Fatalf("%s: format %d, protocol_version %d, payload_bytes_hard_max %d: this client expects 1, 1, %d",
			path, vf.Format, vf.ProtocolVersion, vf.PayloadBytesHardMax, spillway.PayloadBytesHardMax)
	}
	if len(vf.Vectors) == 0 {
		t.Fatalf("%s holds no vectors", path)
	}
	return vf
}

func vectorsOfKind(t *testing.T, kind string) []vector {
	var out []vector
	for _, v := range loadVectors(t).Vectors {
		if v.Kind == kind {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s vectors", kind)
	}
	return out
}

func vectorByName(t *testing.T, name string) vector {
	t.Helper()
	for _, v := range loadVectors(t).Vectors {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no vector named %s", name)
	return vector{}
}

var tiers = map[string]spillway.Tier{"sync": spillway.Sync, "batched": spillway.Batched, "buffered": spillway.Buffered}

var reasons = map[string]spillway.NackReason{
	"bad_magic": spillway.BadMagic, "version_mismatch": spillway.VersionMismatch,
	"bad_header_crc": spillway.BadHeaderCrc, "payload_too_large": spillway.PayloadTooLarge,
	"bad_payload_crc": spillway.BadPayloadCrc, "internal_error": spillway.InternalError,
	"empty_payload": spillway.EmptyPayload, "unknown_message": spillway.UnknownMessage,
	"reserved_flags_set": spillway.ReservedFlagsSet, "overloaded": spillway.Overloaded,
}

// TestVectorsAllKindsCovered fails if the file holds a kind of vector this
// suite does not run, so no vector is skipped silently.
func TestVectorsAllKindsCovered(t *testing.T) {
	counts := map[string]int{}
	names := map[string]bool{}
	for _, v := range loadVectors(t).Vectors {
		switch v.Kind {
		case "request", "response", "rejected_request", "rejected_response":
			counts[v.Kind]++
		default:
			t.Errorf("vector %s has kind %q, which this suite does not run", v.Name, v.Kind)
		}
		if names[v.Name] {
			t.Errorf("vector name %s is not unique", v.Name)
		}
		names[v.Name] = true
	}
	t.Logf("vectors: %v", counts)
}

func encodeRequest(t *testing.T, v vector) []byte {
	t.Helper()
	r := v.Request
	switch r.Type {
	case "push":
		return spillway.AppendPush(nil, tiers[r.Tier], r.Payload)
	case "push_batch":
		recs := make([][]byte, len(r.Records))
		for i := range r.Records {
			recs[i] = r.Records[i]
		}
		return spillway.AppendPushBatch(nil, tiers[r.Tier], recs)
	case "health_check":
		return spillway.AppendHealthCheck(nil)
	}
	t.Fatalf("%s: unknown request type %q", v.Name, r.Type)
	return nil
}

// Every request vector: the encoder produces exactly its frame (also when
// appending after other bytes).
func TestVectorsRequestEncoding(t *testing.T) {
	for _, v := range vectorsOfKind(t, "request") {
		if v.Request.Type != "health_check" {
			if _, ok := tiers[v.Request.Tier]; !ok {
				t.Fatalf("%s: unknown tier %q", v.Name, v.Request.Tier)
			}
		}
		if got := encodeRequest(t, v); !bytes.Equal(got, v.Frame) {
			t.Errorf("%s: encoded\n  % x\nwant\n  % x", v.Name, got, []byte(v.Frame))
		}
		prefix := []byte("xyz")
		var got []byte
		switch v.Request.Type {
		case "push":
			got = spillway.AppendPush(prefix, tiers[v.Request.Tier], v.Request.Payload)
		case "health_check":
			got = spillway.AppendHealthCheck(prefix)
		default:
			continue
		}
		if !bytes.Equal(got, append([]byte("xyz"), v.Frame...)) {
			t.Errorf("%s: appending after 3 bytes gave % x", v.Name, got)
		}
	}
}

// checkResponse compares a decoded response with a response vector.
func checkResponse(t *testing.T, v vector, got spillway.Response) {
	t.Helper()
	want := v.Response
	types := map[string]spillway.MessageType{
		"ack": spillway.MsgAck, "health_check_response": spillway.MsgHealthCheckResponse,
		"ack_batch": spillway.MsgAckBatch, "nack": spillway.MsgNack,
	}
	wt, ok := types[want.Type]
	if !ok {
		t.Fatalf("%s: unknown response type %q", v.Name, want.Type)
	}
	if got.Type != wt {
		t.Fatalf("%s: decoded type %s, want %s", v.Name, got.Type, want.Type)
	}
	switch wt {
	case spillway.MsgAckBatch:
		if want.Count == nil || got.Count != *want.Count {
			t.Errorf("%s: count %d, want %v", v.Name, got.Count, *want.Count)
		}
	case spillway.MsgNack:
		r, ok := reasons[want.Reason]
		if !ok {
			t.Fatalf("%s: unknown reason %q", v.Name, want.Reason)
		}
		if got.Reason != r || int(got.Reason) != *want.ReasonByte || got.Reason.String() != want.Reason {
			t.Errorf("%s: reason %s (0x%02x), want %s (%d)", v.Name, got.Reason, uint8(got.Reason), want.Reason, *want.ReasonByte)
		}
		if got.Reason.Retryable() != *want.Retryable {
			t.Errorf("%s: retryable %v, want %v", v.Name, got.Reason.Retryable(), *want.Retryable)
		}
		if got.Reason.ClosesConnection() != *want.ClosesConnection {
			t.Errorf("%s: closes_connection %v, want %v", v.Name, got.Reason.ClosesConnection(), *want.ClosesConnection)
		}
		wantVersion := 0
		if want.DaemonVersion != nil {
			wantVersion = *want.DaemonVersion
		}
		if int(got.DaemonVersion) != wantVersion {
			t.Errorf("%s: daemon_version %d, want %d", v.Name, got.DaemonVersion, wantVersion)
		}
		ne := &spillway.NackError{Reason: got.Reason, Byte: byte(got.Reason)}
		if ne.Retryable() != *want.Retryable {
			t.Errorf("%s: NackError.Retryable() %v", v.Name, ne.Retryable())
		}
	}
}

// Every response vector decodes to its response, whole, followed by more
// bytes, and never early from a prefix.
func TestVectorsResponseDecoding(t *testing.T) {
	for _, v := range vectorsOfKind(t, "response") {
		got, n, err := spillway.DecodeResponse(v.Frame)
		if err != nil || n != len(v.Frame) {
			t.Fatalf("%s: DecodeResponse = n %d, err %v; want n %d", v.Name, n, err, len(v.Frame))
		}
		checkResponse(t, v, got)
		two := append(append([]byte{}, v.Frame...), v.Frame...)
		if _, n, err := spillway.DecodeResponse(two); err != nil || n != len(v.Frame) {
			t.Errorf("%s followed by itself: n %d, err %v", v.Name, n, err)
		}
		for i := 0; i < len(v.Frame); i++ {
			if _, n, err := spillway.DecodeResponse(v.Frame[:i]); err != nil || n != 0 {
				t.Errorf("%s: its first %d bytes gave n %d, err %v; want \"need more\"", v.Name, i, n, err)
			}
		}
	}
}

// Every rejected_response vector is a protocol error (not a nack, not a
// request for more bytes).
func TestVectorsRejectedResponseDecoding(t *testing.T) {
	for _, v := range vectorsOfKind(t, "rejected_response") {
		_, n, err := spillway.DecodeResponse(v.Frame)
		if err == nil {
			t.Errorf("%s (%s): decoded without error (n %d)", v.Name, v.Fault, n)
			continue
		}
		if !errors.Is(err, spillway.ErrProtocol) {
			t.Errorf("%s (%s): error %v does not wrap ErrProtocol", v.Name, v.Fault, err)
		}
		var ne *spillway.NackError
		if errors.As(err, &ne) {
			t.Errorf("%s (%s): a nack error", v.Name, v.Fault)
		}
	}
}

// The response vectors through a whole Client: a fake daemon answers each
// request with the vector's frame.
func TestVectorsResponsesThroughClient(t *testing.T) {
	for _, v := range vectorsOfKind(t, "response") {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			sock := fakeDaemon(t, func(conn net.Conn) {
				if _, err := readRequest(conn); err == nil {
					conn.Write(v.Frame)
				}
				io.Copy(io.Discard, conn)
			})
			c := dialFake(t, sock, 2*time.Second)
			ctx := context.Background()
			var err error
			switch v.Response.Type {
			case "ack", "nack":
				err = c.Push(ctx, spillway.Sync, []byte("x"))
			case "health_check_response":
				err = c.Health(ctx)
			case "ack_batch":
				recs := make([][]byte, *v.Response.Count)
				for i := range recs {
					recs[i] = []byte{'r'}
				}
				var n int
				n, err = c.PushBatch(ctx, spillway.Buffered, recs)
				if err == nil && n != len(recs) {
					t.Errorf("PushBatch returned %d, want %d", n, len(recs))
				}
			}
			if v.Response.Type != "nack" {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				return
			}
			var ne *spillway.NackError
			if !errors.As(err, &ne) {
				t.Fatalf("got %v, want a *NackError", err)
			}
			if ne.Reason.String() != v.Response.Reason || int(ne.Byte) != *v.Response.ReasonByte || ne.Retryable() != *v.Response.Retryable {
				t.Errorf("got %s (byte %d, retryable %v), want %s", ne.Reason, ne.Byte, ne.Retryable(), v.Response.Reason)
			}
		})
	}
}

// The rejected_response vectors through a whole Client: a protocol error,
// not a timeout (the fake daemon keeps the connection open).
func TestVectorsRejectedResponsesThroughClient(t *testing.T) {
	for _, v := range vectorsOfKind(t, "rejected_response") {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			sock := fakeDaemon(t, func(conn net.Conn) {
				if _, err := readRequest(conn); err == nil {
					conn.Write(v.Frame)
				}
				io.Copy(io.Discard, conn)
			})
			c := dialFake(t, sock, 3*time.Second)
			start := time.Now()
			err := c.Push(context.Background(), spillway.Sync, []byte("x"))
			if !errors.Is(err, spillway.ErrProtocol) {
				t.Fatalf("%s: got %v, want a protocol error", v.Fault, err)
			}
			if time.Since(start) > time.Second {
				t.Errorf("%s: the error took %v (waited for bytes that never come?)", v.Fault, time.Since(start))
			}
			if err := c.Health(context.Background()); !errors.Is(err, spillway.ErrClosed) {
				t.Errorf("after a protocol error the next call gave %v, want ErrClosed", err)
			}
		})
	}
}

// Every request vector, sent raw to the real daemon, gets exactly its answer.
func TestVectorsRequestsAgainstDaemon(t *testing.T) {
	for _, v := range vectorsOfKind(t, "request") {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			conn, got := rawExchange(t, v.Frame, len(v.Answer))
			if !bytes.Equal(got, v.Answer) {
				t.Fatalf("answer\n  % x\nwant\n  % x", got, []byte(v.Answer))
			}
			// Nothing more: the connection stays open and quiet.
			conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if n, err := conn.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("after the answer: n %d, err %v; want silence", n, err)
			}
		})
	}
}

// Every rejected_request vector, sent raw on a fresh connection to the real
// daemon, gets exactly its nack and then end of file.
func TestVectorsRejectedRequestsAgainstDaemon(t *testing.T) {
	for _, v := range vectorsOfKind(t, "rejected_request") {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			if v.ClosesConnection == nil || !*v.ClosesConnection {
				t.Fatalf("vector does not say closes_connection: true")
			}
			conn, got := rawExchange(t, v.Frame, len(v.Answer))
			if !bytes.Equal(got, v.Answer) {
				t.Fatalf("answer\n  % x\nwant\n  % x (%s)", got, []byte(v.Answer), v.Nack.Reason)
			}
			resp, _, err := spillway.DecodeResponse(got)
			if err != nil || resp.Type != spillway.MsgNack || resp.Reason.String() != v.Nack.Reason || int(resp.Reason) != v.Nack.ReasonByte {
				t.Fatalf("answer decodes to %+v, %v; want nack %s", resp, err, v.Nack.Reason)
			}
			n, err := conn.Read(make([]byte, 64))
			if n != 0 || err != io.EOF {
				t.Fatalf("after the nack: n %d, err %v; want end of file", n, err)
			}
		})
	}
}

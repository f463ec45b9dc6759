package spillway_test

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	spillway "github.com/spillway-rs/spillway/clients/go"
)

// fakeDaemon listens on a Unix socket in a fresh temp folder and runs serve
// for every connection. Everything is torn down when the test ends.
func fakeDaemon(t *testing.T, serve func(conn net.Conn)) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "spw-fake-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "fake.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); defer conn.Close(); serve(conn) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return sock
}

// readRequest reads one whole request frame (header, payload, trailer).
func readRequest(conn net.Conn) ([]byte, error) {
	h := make([]byte, 16)
	if _, err := io.ReadFull(conn, h); err != nil {
		return nil, err
	}
	rest := make([]byte, binary.LittleEndian.Uint32(h[8:12])+4)
	if _, err := io.ReadFull(conn, rest); err != nil {
		return nil, err
	}
	return append(h, rest...), nil
}

// frame builds a response frame (filler tier 0x01) independently of the client's encoder.
func frame(typ byte, payload []byte) []byte {
	f := []byte{'W', 'E', 'I', 'R', 1, typ, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(f[8:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(f[12:], crc32.ChecksumIEEE(f[:12]))
	f = append(f, payload...)
	return binary.LittleEndian.AppendUint32(f, crc32.ChecksumIEEE(payload))
}

func dialFake(t *testing.T, sock string, readTimeout time.Duration) *spillway.Client {
	t.Helper()
	c, err := spillway.Dial(context.Background(), sock, &spillway.Options{ReadTimeout: readTimeout, WriteTimeout: readTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func silent(conn net.Conn) { io.Copy(io.Discard, conn) }

func TestHostileNeverAnswersTimesOut(t *testing.T) {
	sock := fakeDaemon(t, silent)
	c := dialFake(t, sock, 500*time.Millisecond)
	start := time.Now()
	err := c.Push(context.Background(), spillway.Sync, []byte("hello"))
	took := time.Since(start)
	if err == nil {
		t.Fatal("push to a daemon that never answers succeeded")
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("error %v is not a net.Error with Timeout()", err)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v: errors.Is(os.ErrDeadlineExceeded / context.DeadlineExceeded) false", err)
	}
	if errors.Is(err, spillway.ErrProtocol) || errors.Is(err, spillway.ErrClosed) {
		t.Errorf("a timeout is reported as protocol/closed: %v", err)
	}
	if took < 450*time.Millisecond || took > 2*time.Second {
		t.Errorf("timed out after %v, want about 500ms", took)
	}
	if !strings.Contains(err.Error(), "timed out after 500ms") {
		t.Errorf("message %q does not say how long it waited", err)
	}
	// The same for a health check, a batch and a pipeline flush.
	if err := c.Health(context.Background()); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("health: %v", err)
	}
	if _, err := c.PushBatch(context.Background(), spillway.Sync, [][]byte{[]byte("a")}); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("push_batch: %v", err)
	}
	// Those three answers are still owed and hold three places of the
	// window; a fresh connection for the pipeline.
	c = dialFake(t, sock, 500*time.Millisecond)
	p := c.Pipeline(4)
	for i := 0; i < 3; i++ {
		if err := p.SendPush(context.Background(), spillway.Sync, []byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	start = time.Now()
	if _, err := p.Flush(context.Background()); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("pipeline flush: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("pipeline flush hung for %v", time.Since(start))
	}
	if p.Outstanding() != 3 {
		t.Errorf("after a timed-out flush %d requests outstanding, want 3", p.Outstanding())
	}
}

func TestHostileNeverAnswersContextDeadline(t *testing.T) {
	sock := fakeDaemon(t, silent)
	c := dialFake(t, sock, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Push(ctx, spillway.Sync, []byte("hello"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a context deadline error", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("error %v is not a net.Error with Timeout()", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %v", took)
	}
}

func TestHostileNeverAnswersContextCancel(t *testing.T) {
	sock := fakeDaemon(t, silent)
	c := dialFake(t, sock, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	err := c.Push(ctx, spillway.Sync, []byte("hello"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %v", took)
	}
}

func TestHostileHalfFrameThenClose(t *testing.T) {
	ack := frame(0x02, nil)
	sock := fakeDaemon(t, func(conn net.Conn) {
		if _, err := readRequest(conn); err == nil {
			conn.Write(ack[:10])
		}
	})
	c := dialFake(t, sock, 2*time.Second)
	err := c.Push(context.Background(), spillway.Sync, []byte("hello"))
	if !errors.Is(err, spillway.ErrProtocol) || !errors.Is(err, spillway.ErrClosed) {
		t.Fatalf("got %v, want a protocol error that is also ErrClosed", err)
	}
	if !strings.Contains(err.Error(), "10 bytes into") {
		t.Errorf("message %q does not say where the frame was cut", err)
	}
	// A whole header, then close.
	sock = fakeDaemon(t, func(conn net.Conn) {
		if _, err := readRequest(conn); err == nil {
			conn.Write(frame(0x07, []byte{1, 0, 0, 0})[:18])
		}
	})
	c = dialFake(t, sock, 2*time.Second)
	_, err = c.PushBatch(context.Background(), spillway.Sync, [][]byte{[]byte("a")})
	if !errors.Is(err, spillway.ErrProtocol) || !errors.Is(err, spillway.ErrClosed) {
		t.Fatalf("got %v, want a protocol error that is also ErrClosed", err)
	}
}

func TestHostileClosesWithoutAnswer(t *testing.T) {
	sock := fakeDaemon(t, func(conn net.Conn) { readRequest(conn) })
	c := dialFake(t, sock, 2*time.Second)
	err := c.Push(context.Background(), spillway.Sync, []byte("hello"))
	if !errors.Is(err, spillway.ErrClosed) || errors.Is(err, spillway.ErrProtocol) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if err := c.Health(context.Background()); !errors.Is(err, spillway.ErrClosed) {
		t.Fatalf("the next call gave %v, want ErrClosed", err)
	}
}

func TestHostileGarbage(t *testing.T) {
	for _, garbage := range []string{"HTTP/1.1 400 Bad Request\r\n\r\n", "WEIR\x01\x02\x01\x00\x00\x00\x00\x00garbage!", "x"} {
		garbage := garbage
		sock := fakeDaemon(t, func(conn net.Conn) {
			if _, err := readRequest(conn); err == nil {
				conn.Write([]byte(garbage))
			}
			silent(conn)
		})
		c := dialFake(t, sock, 2*time.Second)
		start := time.Now()
		err := c.Push(context.Background(), spillway.Sync, []byte("hello"))
		if !errors.Is(err, spillway.ErrProtocol) {
			t.Fatalf("garbage %q: got %v, want a protocol error", garbage, err)
		}
		if time.Since(start) > time.Second {
			t.Errorf("garbage %q: took %v", garbage, time.Since(start))
		}
	}
}

func TestHostileVersionMismatch(t *testing.T) {
	nack := vectorByName(t, "nack_version_mismatch").Frame
	sock := fakeDaemon(t, func(conn net.Conn) {
		if _, err := readRequest(conn); err == nil {
			conn.Write(nack)
		}
	})
	c := dialFake(t, sock, 2*time.Second)
	err := c.Push(context.Background(), spillway.Sync, []byte("hello"))
	var ne *spillway.NackError
	if !errors.As(err, &ne) {
		t.Fatalf("got %v, want a *NackError", err)
	}
	if ne.Reason != spillway.VersionMismatch || ne.Byte != 0x02 || ne.Retryable() || !ne.ClosesConnection() || ne.DaemonVersion != 1 {
		t.Errorf("got %+v (retryable %v)", ne, ne.Retryable())
	}
	if msg := err.Error(); !strings.Contains(msg, "version_mismatch (0x02") || !strings.Contains(msg, "not retryable") {
		t.Errorf("message %q", msg)
	}
	if errors.Is(err, spillway.ErrProtocol) {
		t.Errorf("a nack is reported as a protocol error")
	}
	err = c.Push(context.Background(), spillway.Sync, []byte("hello"))
	if !errors.Is(err, spillway.ErrClosed) || errors.As(err, &ne) {
		t.Errorf("after a closing nack the next call gave %v, want ErrClosed (and no nack)", err)
	}
}

func TestHostileOverloadedIsRetryable(t *testing.T) {
	overloaded := vectorByName(t, "nack_overloaded").Frame
	ack := vectorByName(t, "ack").Frame
	var mu sync.Mutex
	var got [][]byte
	sock := fakeDaemon(t, func(conn net.Conn) {
		for i := 0; ; i++ {
			req, err := readRequest(conn)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, req)
			mu.Unlock()
			if i == 0 || i == 3 {
				conn.Write(overloaded)
			} else if req[5] == 0x04 {
				conn.Write(frame(0x05, nil))
			} else {
				conn.Write(ack)
			}
		}
	})
	c := dialFake(t, sock, 2*time.Second)
	ctx := context.Background()
	err := c.Push(ctx, spillway.Sync, []byte("hello"))
	var ne *spillway.NackError
	if !errors.As(err, &ne) || ne.Reason != spillway.Overloaded || !ne.Retryable() || ne.ClosesConnection() {
		t.Fatalf("got %v, want a retryable overloaded nack", err)
	}
	want := "spillway: daemon nacked: overloaded (0x0a, retryable: back off and resend)"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	// The same connection, resent.
	if err := c.Push(ctx, spillway.Sync, []byte("hello")); err != nil {
		t.Fatalf("resending on the same connection: %v", err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatalf("health on the same connection: %v", err)
	}
	// In a pipeline: only the nacked request fails, the ones after it succeed.
	p := c.Pipeline(8)
	for i := 0; i < 3; i++ {
		if err := p.SendPush(ctx, spillway.Sync, []byte{'a' + byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	results, err := p.Flush(ctx)
	if !errors.As(err, &ne) || ne.Reason != spillway.Overloaded {
		t.Fatalf("flush error %v, want the overloaded nack", err)
	}
	if len(results) != 3 || results[0].Err == nil || results[1].Err != nil || results[2].Err != nil || results[1].Count != 1 {
		t.Fatalf("results %+v: want [overloaded, ok, ok]", results)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 6 {
		t.Errorf("fake daemon got %d requests, want 6", len(got))
	}
}

func TestHostileWrongAckBatchCount(t *testing.T) {
	sock := fakeDaemon(t, func(conn net.Conn) {
		if _, err := readRequest(conn); err == nil {
			conn.Write(frame(0x07, []byte{2, 0, 0, 0}))
		}
		silent(conn)
	})
	c := dialFake(t, sock, 2*time.Second)
	_, err := c.PushBatch(context.Background(), spillway.Sync, [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	if !errors.Is(err, spillway.ErrProtocol) || !strings.Contains(err.Error(), "count of 2") {
		t.Fatalf("got %v, want a protocol error about the count", err)
	}
}

func TestHostileUnexpectedResponseType(t *testing.T) {
	sock := fakeDaemon(t, func(conn net.Conn) {
		if _, err := readRequest(conn); err == nil {
			conn.Write(frame(0x05, nil)) // a HealthCheckResponse to a Push
		}
		silent(conn)
	})
	c := dialFake(t, sock, 2*time.Second)
	err := c.Push(context.Background(), spillway.Sync, []byte("a"))
	if !errors.Is(err, spillway.ErrProtocol) {
		t.Fatalf("got %v, want a protocol error", err)
	}
	// An Ack to a PushBatch.
	sock = fakeDaemon(t, func(conn net.Conn) {
		if _, err := readRequest(conn); err == nil {
			conn.Write(frame(0x02, nil))
		}
		silent(conn)
	})
	c = dialFake(t, sock, 2*time.Second)
	if _, err := c.PushBatch(context.Background(), spillway.Sync, [][]byte{[]byte("a")}); !errors.Is(err, spillway.ErrProtocol) {
		t.Fatalf("got %v, want a protocol error", err)
	}
}

// An answer that arrives after its request timed out is skipped: the next
// request gets its own answer.
func TestHostileLateAnswerIsSkipped(t *testing.T) {
	sock := fakeDaemon(t, func(conn net.Conn) {
		if _, err := readRequest(conn); err != nil {
			return
		}
		time.Sleep(400 * time.Millisecond)
		conn.Write(vectorByName(t, "nack_internal_error").Frame) // the late answer to the push
		if _, err := readRequest(conn); err != nil {
			return
		}
		conn.Write(frame(0x05, nil))
		silent(conn)
	})
	c := dialFake(t, sock, 200*time.Millisecond)
	if err := c.Push(context.Background(), spillway.Sync, []byte("a")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a timeout", err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := c.Health(context.Background()); err != nil {
		t.Fatalf("health after a timed-out push: %v (the late answer was not skipped)", err)
	}
}

// The daemon nacks in the middle of a pipeline and closes: the nacked request
// gets the nack, those before it their acks, those after it ErrClosed.
func TestHostileClosingNackInPipeline(t *testing.T) {
	ack := vectorByName(t, "ack").Frame
	nack := vectorByName(t, "nack_bad_payload_crc").Frame
	sock := fakeDaemon(t, func(conn net.Conn) {
		for i := 0; i < 3; i++ {
			if _, err := readRequest(conn); err != nil {
				return
			}
			if i < 2 {
				conn.Write(ack)
			} else {
				conn.Write(nack)
				return
			}
		}
	})
	c := dialFake(t, sock, 2*time.Second)
	p := c.Pipeline(16)
	for i := 0; i < 5; i++ {
		if err := p.SendPush(context.Background(), spillway.Buffered, []byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	results, err := p.Flush(context.Background())
	var ne *spillway.NackError
	if !errors.As(err, &ne) || ne.Reason != spillway.BadPayloadCrc {
		t.Fatalf("flush error %v, want the bad_payload_crc nack", err)
	}
	if len(results) != 5 {
		t.Fatalf("%d results, want 5", len(results))
	}
	for i, r := range results {
		if r.Seq != uint64(i) {
			t.Errorf("result %d has seq %d", i, r.Seq)
		}
		switch {
		case i < 2 && r.Err != nil:
			t.Errorf("result %d: %v, want ack", i, r.Err)
		case i == 2 && !errors.As(r.Err, &ne):
			t.Errorf("result 2: %v, want the nack", r.Err)
		case i > 2 && (!errors.Is(r.Err, spillway.ErrClosed) || errors.As(r.Err, &ne)):
			t.Errorf("result %d: %v, want ErrClosed", i, r.Err)
		}
	}
}

// Abandon drops buffered frames unsent and skips the answers still owed.
func TestHostilePipelineAbandon(t *testing.T) {
	ack := vectorByName(t, "ack").Frame
	types := make(chan byte, 16)
	sock := fakeDaemon(t, func(conn net.Conn) {
		for {
			req, err := readRequest(conn)
			if err != nil {
				close(types)
				return
			}
			types <- req[5]
			if req[5] == 0x04 {
				conn.Write(frame(0x05, nil))
			} else {
				time.Sleep(20 * time.Millisecond)
				conn.Write(ack)
			}
		}
	})
	c := dialFake(t, sock, 2*time.Second)
	p := c.Pipeline(16) // writes every 4 frames
	for i := 0; i < 5; i++ {
		if err := p.SendPush(context.Background(), spillway.Sync, []byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	p.Abandon()
	if p.Outstanding() != 0 {
		t.Fatalf("%d outstanding after Abandon", p.Outstanding())
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatalf("health after Abandon: %v", err)
	}
	c.Close()
	var got []byte
	for b := range types {
		got = append(got, b)
	}
	if string(got) != "\x01\x01\x01\x01\x04" {
		t.Fatalf("fake daemon got request types % x, want 4 pushes then a health check", got)
	}
}

package spillway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	spillway "github.com/spillway-rs/spillway/clients/go"
)

// runID keeps this run's records apart from anything else in delivered.ndjson.
var runID = fmt.Sprintf("go-%d-%d", os.Getpid(), time.Now().UnixNano())

func TestDaemonPushEachTier(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	prefix := runID + "-tier-"
	var want []string
	for _, tier := range []spillway.Tier{spillway.Sync, spillway.Batched, spillway.Buffered} {
		rec := prefix + tier.String()
		if err := c.Push(ctx, tier, []byte(rec)); err != nil {
			t.Fatalf("push at %s: %v", tier, err)
		}
		want = append(want, rec)
	}
	waitDelivered(t, prefix, want)
}

func TestDaemonHealth(t *testing.T) {
	c := dial(t)
	for i := 0; i < 3; i++ {
		if err := c.Health(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDaemonPushBatch(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	prefix := runID + "-batch-"
	one := [][]byte{[]byte(prefix + "single")}
	n, err := c.PushBatch(ctx, spillway.Sync, one)
	if err != nil || n != 1 {
		t.Fatalf("push_batch of 1: %d, %v", n, err)
	}
	want := []string{string(one[0])}
	recs := make([][]byte, 1000)
	for i := range recs {
		recs[i] = []byte(fmt.Sprintf("%s%04d", prefix, i))
		want = append(want, string(recs[i]))
	}
	n, err = c.PushBatch(ctx, spillway.Batched, recs)
	if err != nil || n != 1000 {
		t.Fatalf("push_batch of 1000: %d, %v", n, err)
	}
	waitDelivered(t, prefix, want)
}

func TestDaemonPipeline5000InOrder(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	prefix := runID + "-pipe-"
	p := c.Pipeline(64)
	if p.Window() != 64 {
		t.Fatalf("window %d", p.Window())
	}
	want := make([]string, 5000)
	for i := range want {
		want[i] = fmt.Sprintf("%s%05d", prefix, i)
		if err := p.SendPush(ctx, spillway.Sync, []byte(want[i])); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if p.Outstanding() > 5000 {
			t.Fatal("outstanding count is wrong")
		}
	}
	results, err := p.Flush(ctx)
	if err != nil {
		t.Fatalf("flush: %v", err)
	}
	if len(results) != 5000 {
		t.Fatalf("%d results, want 5000", len(results))
	}
	first := results[0].Seq
	for i, r := range results {
		if r.Err != nil || r.Count != 1 || r.Request != spillway.MsgPush || r.Seq != first+uint64(i) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if p.Outstanding() != 0 {
		t.Fatalf("%d outstanding after flush", p.Outstanding())
	}
	waitDelivered(t, prefix, want)
}

// Batches, health checks and the client's own calls mixed into a pipeline.
func TestDaemonPipelineMixed(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	prefix := runID + "-mixed-"
	p := c.Pipeline(8)
	var want []string
	for i := 0; i < 50; i++ {
		batch := make([][]byte, 1+i%5)
		for j := range batch {
			batch[j] = []byte(fmt.Sprintf("%s%03d-%d", prefix, i, j))
			want = append(want, string(batch[j]))
		}
		if err := p.SendPushBatch(ctx, spillway.Buffered, batch); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if err := p.SendHealth(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if i == 25 {
			// Large enough to be written from the caller's slice (writev).
			big := fmt.Sprintf("%s%03d-big-%s", prefix, i, strings.Repeat("q", 100000))
			want = append(want, big)
			if err := p.SendPush(ctx, spillway.Sync, []byte(big)); err != nil {
				t.Fatal(err)
			}
		}
		if i%7 == 0 {
			rec := fmt.Sprintf("%s%03d-direct", prefix, i)
			want = append(want, rec)
			if err := c.Push(ctx, spillway.Sync, []byte(rec)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var results []spillway.Result
	for p.Outstanding() > 0 {
		r, err := p.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if len(results) != 56 {
		t.Fatalf("%d results, want 56", len(results))
	}
	batches := 0
	for i, r := range results {
		if r.Err != nil || (i > 0 && r.Seq != results[i-1].Seq+1) {
			t.Fatalf("result %d: %+v", i, r)
		}
		if r.Request == spillway.MsgPushBatch {
			if r.Count != 1+batches%5 {
				t.Fatalf("batch %d acked %d records", batches, r.Count)
			}
			batches++
		}
	}
	if _, err := p.Recv(ctx); err == nil {
		t.Fatal("Recv with nothing outstanding succeeded")
	}
	waitDelivered(t, prefix, want)
}

func TestDaemonLocalRefusal(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	sent := spillway.BytesWritten(c)
	var re *spillway.RecordError

	check := func(what string, err error, index int, limit bool) {
		t.Helper()
		if !errors.As(err, &re) {
			t.Fatalf("%s: got %v, want a *RecordError", what, err)
		}
		if re.Index != index {
			t.Errorf("%s: index %d, want %d (%v)", what, re.Index, index, err)
		}
		if limit && (re.Limit != daemonCap || !strings.Contains(err.Error(), "payload_bytes_max 1048576")) {
			t.Errorf("%s: %v does not name the limit", what, err)
		}
		if index >= 0 && !strings.Contains(err.Error(), fmt.Sprintf("record %d", index)) {
			t.Errorf("%s: %v does not name the record", what, err)
		}
		if got := spillway.BytesWritten(c); got != sent {
			t.Fatalf("%s: %d bytes were sent", what, got-sent)
		}
	}
	check("empty push", c.Push(ctx, spillway.Sync, nil), 0, false)
	check("empty push", c.Push(ctx, spillway.Sync, []byte{}), 0, false)
	check("push over the cap", c.Push(ctx, spillway.Sync, make([]byte, daemonCap+1)), 0, true)
	check("unknown tier", c.Push(ctx, spillway.Tier(4), []byte("x")), -1, false)
	_, err := c.PushBatch(ctx, spillway.Sync, nil)
	check("batch of no records", err, -1, false)
	_, err = c.PushBatch(ctx, spillway.Sync, [][]byte{[]byte("a"), []byte("b"), {}, []byte("d")})
	check("batch with an empty record", err, 2, false)
	half := make([]byte, daemonCap/2)
	_, err = c.PushBatch(ctx, spillway.Sync, [][]byte{[]byte("a"), half, half})
	check("batch over the cap", err, 2, true)
	p := c.Pipeline(4)
	check("pipelined empty push", p.SendPush(ctx, spillway.Sync, nil), 0, false)
	check("pipelined push over the cap", p.SendPush(ctx, spillway.Sync, make([]byte, daemonCap+1)), 0, true)
	check("pipelined batch over the cap", p.SendPushBatch(ctx, spillway.Sync, [][]byte{half, half}), 1, true)
	if p.Outstanding() != 0 {
		t.Fatalf("refused requests are outstanding: %d", p.Outstanding())
	}

	// The connection still works, and requests exactly at the cap go through.
	if err := c.Health(ctx); err != nil {
		t.Fatalf("health after the refusals: %v", err)
	}
	if err := c.Push(ctx, spillway.Buffered, bytes.Repeat([]byte{'z'}, daemonCap)); err != nil {
		t.Fatalf("a push of exactly payload_bytes_max: %v", err)
	}
	if n, err := c.PushBatch(ctx, spillway.Buffered, [][]byte{bytes.Repeat([]byte{'y'}, daemonCap-8)}); err != nil || n != 1 {
		t.Fatalf("a batch of exactly payload_bytes_max: %d, %v", n, err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
}

// Without the local cap, the daemon itself refuses an oversized push with
// PayloadTooLarge and closes the connection: a fatal nack.
func TestDaemonPayloadTooLargeNack(t *testing.T) {
	c, err := spillway.Dial(context.Background(), daemon.socket, nil) // default cap 16 MiB
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Options().PayloadBytesMax != spillway.PayloadBytesHardMax || c.Options().ReadTimeout != 10*time.Second {
		t.Fatalf("defaults: %+v", c.Options())
	}
	err = c.Push(context.Background(), spillway.Sync, make([]byte, 2*daemonCap))
	var ne *spillway.NackError
	if !errors.As(err, &ne) || ne.Reason != spillway.PayloadTooLarge || ne.Retryable() {
		t.Fatalf("got %v, want a payload_too_large nack", err)
	}
	if err := c.Health(context.Background()); !errors.Is(err, spillway.ErrClosed) {
		t.Fatalf("after the nack: %v, want ErrClosed", err)
	}
}

func TestDialErrors(t *testing.T) {
	_, err := spillway.Dial(context.Background(), daemon.dir+"/no-such.sock", nil)
	if err == nil || !strings.Contains(err.Error(), "no-such.sock") {
		t.Fatalf("dialing a missing socket: %v", err)
	}
	if _, err := spillway.Dial(context.Background(), daemon.socket, &spillway.Options{PayloadBytesMax: spillway.PayloadBytesHardMax + 1}); err == nil {
		t.Fatal("a PayloadBytesMax over the hard cap was accepted")
	}
	c := dial(t)
	c.Close()
	if err := c.Health(context.Background()); !errors.Is(err, spillway.ErrClosed) {
		t.Fatalf("a call after Close: %v", err)
	}
}

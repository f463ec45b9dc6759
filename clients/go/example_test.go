package spillway_test

import (
	"context"
	"errors"
	"log"
	"time"

	spillway "github.com/spillway-rs/spillway/clients/go"
)

// Compiled, not run (it needs a daemon at the socket path).
func Example() {
	ctx := context.Background()
	c, err := spillway.Dial(ctx, "/run/spillway/spillway.sock", &spillway.Options{ReadTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// One record, acked once fdatasync has returned.
	for {
		err = c.Push(ctx, spillway.Sync, []byte(`{"order":1042,"status":"shipped"}`))
		var nack *spillway.NackError
		if errors.As(err, &nack) && nack.Retryable() {
			time.Sleep(100 * time.Millisecond) // Overloaded / InternalError: back off, resend
			continue
		}
		break
	}
	if err != nil {
		log.Fatal(err)
	}

	// Several records in one frame.
	if _, err := c.PushBatch(ctx, spillway.Batched, [][]byte{[]byte("a"), []byte("b")}); err != nil {
		log.Fatal(err)
	}

	// Up to 64 frames in flight; answers come back in order.
	p := c.Pipeline(64)
	for i := 0; i < 1000; i++ {
		if err := p.SendPush(ctx, spillway.Buffered, []byte("event")); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := p.Flush(ctx); err != nil {
		log.Fatal(err)
	}
}

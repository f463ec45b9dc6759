package spillway_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	spillway "github.com/spillway-rs/spillway/clients/go"
)

// The daemon every test that needs one shares, started by TestMain.
var daemon struct {
	dir       string
	socket    string
	delivered string
	stderr    string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// daemonCap is server.payload_bytes_max in the test daemon's config.
const daemonCap = 1048576

const configTemplate = `[server]
socket_path = "{{tmp}}/spillway.sock"
data_dir = "{{tmp}}/wab"
shards = 1
payload_bytes_max = 1048576
[wab]
segment_bytes_max = 4194304
wab_bytes_max = 268435456
[sink]
type = "file"
path = "{{tmp}}/delivered.ndjson"
linger_ms = 5
[admin]
socket_path = "{{tmp}}/admin.sock"
`

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	bin := os.Getenv("SPILLWAY_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "SPILLWAY_BIN is not set: set it to the path of the spillway daemon binary (e.g. target/release/spillway)")
		return 1
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		fmt.Fprintf(os.Stderr, "SPILLWAY_BIN=%s is not an executable file (%v)\n", bin, err)
		return 1
	}
	if err := startDaemon(bin); err != nil {
		fmt.Fprintln(os.Stderr, "starting the daemon:", err)
		stopDaemon()
		return 1
	}
	code := m.Run()
	if err := stopDaemon(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the daemon:", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		os.RemoveAll(daemon.dir)
	} else {
		fmt.Fprintln(os.Stderr, "daemon folder kept for inspection:", daemon.dir)
	}
	return code
}

func startDaemon(bin string) error {
	dir, err := os.MkdirTemp("", "spillway-go-") // mode 0700
	if err != nil {
		return err
	}
	daemon.dir = dir
	daemon.socket = filepath.Join(dir, "spillway.sock")
	daemon.delivered = filepath.Join(dir, "delivered.ndjson")
	daemon.stderr = filepath.Join(dir, "daemon.stderr")
	config := filepath.Join(dir, "spillway.toml")
	if err := os.WriteFile(config, []byte(strings.ReplaceAll(configTemplate, "{{tmp}}", dir)), 0o600); err != nil {
		return err
	}
	stdout, err := os.Create(filepath.Join(dir, "daemon.stdout"))
	if err != nil {
		return err
	}
	stderr, err := os.Create(daemon.stderr)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "run", "--config", config)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	daemon.cmd = cmd
	daemon.exited = make(chan struct{})
	go func() { cmd.Wait(); stdout.Close(); stderr.Close(); close(daemon.exited) }()

	limit := time.Now().Add(15 * time.Second)
	var last error
	for time.Now().Before(limit) {
		select {
		case <-daemon.exited:
			return fmt.Errorf("the daemon exited at start (%v); its stderr:\n%s", cmd.ProcessState, readStderr())
		default:
		}
		if last = probe(); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the daemon did not answer a health check within 15 s (last: %v); its stderr:\n%s", last, readStderr())
}

func probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := spillway.Dial(ctx, daemon.socket, &spillway.Options{ReadTimeout: time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Health(ctx)
}

func readStderr() string {
	b, _ := os.ReadFile(daemon.stderr)
	return string(b)
}

func stopDaemon() error {
	if daemon.cmd == nil {
		return nil
	}
	select {
	case <-daemon.exited:
		return fmt.Errorf("the daemon had already exited (%v); its stderr:\n%s", daemon.cmd.ProcessState, readStderr())
	default:
	}
	daemon.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-daemon.exited:
		return nil
	case <-time.After(10 * time.Second):
		daemon.cmd.Process.Kill()
		<-daemon.exited
		return fmt.Errorf("the daemon ignored SIGTERM for 10 s and was killed")
	}
}

// dial connects to the test daemon with its payload cap, failing the test on error.
func dial(t *testing.T) *spillway.Client {
	t.Helper()
	c, err := spillway.Dial(context.Background(), daemon.socket, &spillway.Options{
		PayloadBytesMax: daemonCap,
		ReadTimeout:     10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitDelivered polls delivered.ndjson (up to 15 s) until every line that
// starts with prefix has arrived, and checks they are exactly want, in order.
func waitDelivered(t *testing.T, prefix string, want []string) {
	t.Helper()
	waitDeliveredIn(t, daemon.delivered, prefix, want)
}

// waitDeliveredIn is waitDelivered for the sink file of another daemon.
func waitDeliveredIn(t *testing.T, delivered, prefix string, want []string) {
	t.Helper()
	limit := time.Now().Add(15 * time.Second)
	var got []string
	for {
		got = got[:0]
		data, err := os.ReadFile(delivered)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if bytes.HasPrefix(line, []byte(prefix)) {
				got = append(got, string(line))
			}
		}
		if len(got) >= len(want) || time.Now().After(limit) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(got) != len(want) {
		t.Fatalf("delivered.ndjson holds %d records with prefix %q after 15 s, want %d", len(got), prefix, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delivered record %d with prefix %q is %q, want %q (records out of order)", i, prefix, got[i], want[i])
		}
	}
}

// rawExchange opens a fresh connection to the daemon, writes frame, and
// returns exactly want-length bytes of the answer.
func rawExchange(t *testing.T, frame []byte, n int) (net.Conn, []byte) {
	t.Helper()
	conn, err := net.Dial("unix", daemon.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(frame); err != nil {
		t.Fatalf("writing the frame: %v", err)
	}
	got := make([]byte, n)
	if k, err := readFull(conn, got); err != nil {
		t.Fatalf("reading the %d-byte answer: got %d bytes (% x): %v", n, k, got[:k], err)
	}
	return conn, got
}

func readFull(conn net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := conn.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

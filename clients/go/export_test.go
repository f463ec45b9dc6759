package spillway

import "crypto/tls"

// BytesWritten is the number of bytes c has written to its socket (for tests).
func BytesWritten(c *Client) uint64 { return c.bytesWritten }

// TLSState is the TLS state of c's connection, and whether it is TLS (for tests).
func TLSState(c *Client) (tls.ConnectionState, bool) {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return tls.ConnectionState{}, false
	}
	return tc.ConnectionState(), true
}

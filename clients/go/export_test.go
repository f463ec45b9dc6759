package spillway

// BytesWritten is the number of bytes c has written to its socket (for tests).
func BytesWritten(c *Client) uint64 { return c.bytesWritten }

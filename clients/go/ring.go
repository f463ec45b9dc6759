package spillway

// ring is a FIFO queue that reuses its storage.
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		size := 2 * len(r.buf)
		if size < 16 {
			size = 16
		}
		bigger := make([]T, size)
		for i := 0; i < r.n; i++ {
			bigger[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = bigger, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

// pop removes and returns the oldest element; the ring must not be empty.
func (r *ring[T]) pop() T {
	v := r.buf[r.head]
	var zero T
	r.buf[r.head] = zero
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	return v
}

// at returns a pointer to the i-th oldest element.
func (r *ring[T]) at(i int) *T { return &r.buf[(r.head+i)%len(r.buf)] }

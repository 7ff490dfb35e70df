package output

// ring keeps the most recent bytes of the combined stream together with the
// absolute offset of its oldest byte, so recent cursor reads skip the disk.
type ring struct {
	capacity int    // 0 disables the ring
	buf      []byte // allocated on first write, so silent jobs cost nothing
	head     int    // index in buf of the oldest byte
	n        int    // bytes held
	start    int64  // absolute offset of the oldest byte held
}

// write appends p, evicting the oldest bytes beyond capacity.
func (r *ring) write(p []byte) {
	end := r.start + int64(r.n) + int64(len(p))
	if r.capacity == 0 {
		r.start = end
		return
	}
	if r.buf == nil {
		r.buf = make([]byte, r.capacity)
	}
	if len(p) >= r.capacity {
		copy(r.buf, p[len(p)-r.capacity:])
		r.head, r.n = 0, r.capacity
	} else {
		tail := (r.head + r.n) % r.capacity
		k := copy(r.buf[tail:], p)
		copy(r.buf, p[k:])
		r.n += len(p)
		if over := r.n - r.capacity; over > 0 {
			r.head = (r.head + over) % r.capacity
			r.n = r.capacity
		}
	}
	r.start = end - int64(r.n)
}

// readAt fills p with the bytes at absolute offset off and reports whether
// the ring held the whole range.
func (r *ring) readAt(p []byte, off int64) bool {
	if off < r.start || off+int64(len(p)) > r.start+int64(r.n) {
		return false
	}
	if len(p) == 0 {
		return true
	}
	i := (r.head + int(off-r.start)) % r.capacity
	k := copy(p, r.buf[i:])
	copy(p[k:], r.buf)
	return true
}

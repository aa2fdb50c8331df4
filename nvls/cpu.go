package nvls

import (
	"fmt"
	"io"
	"sync"
	"time"

	"bitalign/kernels"
)

// NewCPUGroup returns n Comms (n a power of two, 1..64) sharing memory in this process, one per rank; each is
// used by its own goroutine. Collectives are two-phase: every rank reduces its chunk of the elements over all
// ranks' buffers in the group's order, then every rank copies all chunks; a chunk boundary never changes bits.
func NewCPUGroup(n int, opts ...Option) ([]Comm, error) {
	if err := checkSize(n); err != nil {
		return nil, err
	}
	o := options{timeout: DefaultTimeout, order: Tree}
	for _, f := range opts {
		f(&o)
	}
	g := &cpuGroup{n: n, opt: o, bufs: make([][]float32, n), res: make([][]float32, n), arrived: make([]bool, n),
		release: make(chan struct{})}
	cs := make([]Comm, n)
	for r := range cs {
		cs[r] = &cpuComm{g: g, rank: r}
	}
	return cs, nil
}

type cpuGroup struct {
	n   int
	opt options

	mu      sync.Mutex
	count   int
	arrived []bool
	op      string        // the collective of the current phase (checked: all ranks must agree)
	length  int           // its element count
	release chan struct{} // closed when the current phase is complete (or the group breaks)
	broken  error

	bufs [][]float32 // per rank: the buffer it contributes this call
	res  [][]float32 // per rank: its reduced chunk
}

type cpuComm struct {
	g    *cpuGroup
	rank int
}

func (c *cpuComm) Rank() int { return c.rank }
func (c *cpuComm) Size() int { return c.g.n }

// barrier waits until every rank has called barrier with the same op and length.
func (c *cpuComm) barrier(op string, length int) error {
	g := c.g
	g.mu.Lock()
	if g.broken != nil {
		g.mu.Unlock()
		return g.broken
	}
	if g.count == 0 {
		g.op, g.length = op, length
	} else if g.op != op || g.length != length {
		g.broken = fmt.Errorf("nvls: rank %d called %s(%d elements) while other ranks are in %s(%d elements)", c.rank, op, length, g.op, g.length)
		close(g.release)
		g.mu.Unlock()
		return g.broken
	}
	g.arrived[c.rank] = true
	g.count++
	rel := g.release
	if g.count == g.n {
		g.count = 0
		clear(g.arrived)
		g.release = make(chan struct{})
		close(rel)
		g.mu.Unlock()
		return nil
	}
	g.mu.Unlock()
	var timeout <-chan time.Time
	if g.opt.timeout > 0 {
		t := time.NewTimer(g.opt.timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-rel:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.broken
	case <-timeout:
		g.mu.Lock()
		defer g.mu.Unlock()
		select {
		case <-rel: // completed while we took the lock
			return g.broken
		default:
		}
		var missing []int
		for r, ok := range g.arrived {
			if !ok {
				missing = append(missing, r)
			}
		}
		g.broken = &TimeoutError{Op: op, Rank: c.rank, Missing: missing, After: g.opt.timeout}
		close(rel)
		return g.broken
	}
}

// reduce is the first phase: every rank publishes in, then reduces its chunk of the elements over all ranks'
// buffers with combine; it returns every rank's reduced chunk (valid until the caller's next barrier).
func (c *cpuComm) reduce(op string, in []float32, combine func(vals []float32, chunk int) float32) ([][]float32, error) {
	g := c.g
	g.mu.Lock()
	g.bufs[c.rank] = in
	g.mu.Unlock()
	if err := c.barrier(op, len(in)); err != nil {
		return nil, err
	}
	L := len(in)
	lo, hi := chunk(L, g.n, c.rank)
	res := make([]float32, hi-lo)
	vals := make([]float32, g.n)
	for i := lo; i < hi; i++ {
		for r := 0; r < g.n; r++ {
			vals[r] = g.bufs[r][i]
		}
		res[i-lo] = combine(vals, ringChunk(L, g.n, i))
	}
	g.mu.Lock()
	g.res[c.rank] = res
	g.mu.Unlock()
	if err := c.barrier(op+"/gather", L); err != nil {
		return nil, err
	}
	return g.res, nil
}

// chunk is the element range [floor(r·L/n), floor((r+1)·L/n)) rank r reduces.
func chunk(L, n, r int) (int, int) {
	return int(int64(r) * int64(L) / int64(n)), int(int64(r+1) * int64(L) / int64(n))
}

// ringChunk is the ring chunk of element i (the same partition as chunk).
func ringChunk(L, n, i int) int {
	// largest r with floor(r·L/n) <= i
	r := int((int64(i)*int64(n) + int64(n) - 1) / int64(max(L, 1)))
	for r > 0 {
		if lo, _ := chunk(L, n, r); lo <= i {
			break
		}
		r--
	}
	for r+1 < n {
		if lo, _ := chunk(L, n, r+1); lo <= i {
			r++
			continue
		}
		break
	}
	return r
}

func (c *cpuComm) sum(vals []float32, ch int) float32 {
	if c.g.opt.order == Ring {
		return ringSum(vals, ch)
	}
	return kernels.TreeSum(vals) // the canonical tree over ranks (docs/arithmetic.md §12); vals is scratch
}

// AllReduce implements Comm.
func (c *cpuComm) AllReduce(buf []float32) error {
	res, err := c.reduce("AllReduce", buf, c.sum)
	if err != nil {
		return err
	}
	return c.gather("AllReduce", buf, res)
}

// gather copies every rank's chunk into buf, then waits so that no rank reuses its buffers while others read.
func (c *cpuComm) gather(op string, buf []float32, res [][]float32) error {
	for r := 0; r < c.g.n; r++ {
		lo, _ := chunk(len(buf), c.g.n, r)
		copy(buf[lo:], res[r])
	}
	return c.barrier(op+"/done", len(buf))
}

// AllReduceMax implements Comm.
func (c *cpuComm) AllReduceMax(buf []float32) error {
	res, err := c.reduce("AllReduceMax", buf, func(v []float32, _ int) float32 { return treeMax(v) })
	if err != nil {
		return err
	}
	return c.gather("AllReduceMax", buf, res)
}

func treeMax(v []float32) float32 {
	if len(v) == 1 {
		return v[0]
	}
	return max32(treeMax(v[:len(v)/2]), treeMax(v[len(v)/2:]))
}

// ReduceScatter implements Comm: the same reduction as AllReduce, then only this rank's slice is copied out.
func (c *cpuComm) ReduceScatter(out, in []float32) error {
	n := c.g.n
	if len(in) != n*len(out) {
		return fmt.Errorf("nvls: ReduceScatter on rank %d: in has %d elements, want %d × %d", c.rank, len(in), n, len(out))
	}
	res, err := c.reduce("ReduceScatter", in, c.sum)
	if err != nil {
		return err
	}
	lo, hi := c.rank*len(out), (c.rank+1)*len(out)
	for r := 0; r < n; r++ {
		clo, chi := chunk(len(in), n, r)
		a, b := max(lo, clo), min(hi, chi)
		if a < b {
			copy(out[a-lo:b-lo], res[r][a-clo:b-clo])
		}
	}
	return c.barrier("ReduceScatter/done", len(in))
}

// AllGather implements Comm.
func (c *cpuComm) AllGather(out, in []float32) error {
	g := c.g
	if len(out) != g.n*len(in) {
		return fmt.Errorf("nvls: AllGather on rank %d: out has %d elements, want %d × %d", c.rank, len(out), g.n, len(in))
	}
	g.mu.Lock()
	g.bufs[c.rank] = in
	g.mu.Unlock()
	if err := c.barrier("AllGather", len(in)); err != nil {
		return err
	}
	for r := 0; r < g.n; r++ {
		copy(out[r*len(in):(r+1)*len(in)], g.bufs[r])
	}
	return c.barrier("AllGather/done", len(in))
}

var _ io.Closer = (*cpuComm)(nil)

// Close implements io.Closer: the group breaks, and every rank waiting or calling later gets ErrClosed.
func (c *cpuComm) Close() error {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.broken == nil {
		g.broken = fmt.Errorf("%w by rank %d", ErrClosed, c.rank)
		close(g.release)
	}
	return nil
}

// Package nvls provides deterministic collectives for tensor parallelism: a Comm interface whose AllReduce sums
// the ranks' values in one fixed pairwise tree over ranks in rank order (docs/arithmetic.md §12), so that every
// rank receives identical bits and a row-parallel matmul split over tp ranks finishes the same 8-segment tree
// as one rank. NewCPUGroup is the in-process transport (one goroutine per rank); the GPU transport (peer loads
// over NVLink, in gpu*.go) implements the same interface and the same order.
//
// WithOrder(Ring) gives the standard profile's control group: a ring reduce-scatter + all-gather whose
// summation order depends on the element's chunk and the number of ranks, as NCCL's ring does.
package nvls

import (
	"errors"
	"fmt"
	"time"
)

// Comm is one rank's endpoint of a group. Each Comm is used by one goroutine; every rank must call the same
// collectives in the same order with the same lengths.
type Comm interface {
	Rank() int
	Size() int
	// AllReduce sums buf over ranks in place: fixed pairwise tree in rank order, identical bits on every rank.
	AllReduce(buf []float32) error
	// ReduceScatter: in has Size()·c elements, out has c; out = this rank's slice [rank·c, (rank+1)·c) of the
	// AllReduce of in, with the same bits.
	ReduceScatter(out, in []float32) error
	// AllGather: in has c elements, out has Size()·c; out[r·c:(r+1)·c] = rank r's in.
	AllGather(out, in []float32) error
	// AllReduceMax is the element-wise maximum over ranks in place (NaN if any rank has NaN).
	AllReduceMax(buf []float32) error
}

// A CPU group's Comms also implement io.Closer: Close breaks the group, and every rank waiting in or calling a
// collective afterwards gets an error wrapping ErrClosed.

// Order is the summation order of AllReduce and ReduceScatter.
type Order int

const (
	Tree Order = iota // canonical: T(0,n) = T(0,n/2) + T(n/2,n), the same bits on every rank
	Ring              // standard: chunk c summed sequentially from rank (c+1) mod n around the ring
)

func (o Order) String() string {
	switch o {
	case Tree:
		return "tree"
	case Ring:
		return "ring"
	}
	return fmt.Sprintf("Order(%d)", int(o))
}

// Option configures a group.
type Option func(*options)

type options struct {
	timeout time.Duration
	order   Order
}

// DefaultTimeout is how long a rank waits for the others at a collective before it reports them missing.
const DefaultTimeout = 60 * time.Second

// WithTimeout sets how long a collective waits for the other ranks; d <= 0 waits forever.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithOrder sets the summation order (Tree by default).
func WithOrder(ord Order) Option { return func(o *options) { o.order = ord } }

// ErrClosed is returned by collectives of a group one of whose ranks has closed.
var ErrClosed = errors.New("nvls: group closed")

// TimeoutError reports the ranks that did not arrive at a collective in time.
type TimeoutError struct {
	Op      string
	Rank    int   // the rank that gave up waiting
	Missing []int // ranks that never arrived
	After   time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("nvls: %s on rank %d: rank(s) %v did not arrive within %v", e.Op, e.Rank, e.Missing, e.After)
}

// checkSize accepts group sizes that are powers of two in [1, 64].
func checkSize(n int) error {
	if n < 1 || n > 64 || n&(n-1) != 0 {
		return fmt.Errorf("nvls: group size %d is not a power of two in [1, 64]", n)
	}
	return nil
}

// ringSum is the ring order for an element of chunk c: ranks (c+1) mod n, (c+2) mod n, ..., c.
func ringSum(v []float32, c int) float32 {
	n := len(v)
	s := v[(c+1)%n]
	for i := 2; i <= n; i++ {
		s = float32(s + v[(c+i)%n])
	}
	return s
}

// max32 is the collectives' max: NaN if either is NaN, else b > a ? b : a.
func max32(a, b float32) float32 {
	if a != a {
		return a
	}
	if b != b || b > a {
		return b
	}
	return a
}

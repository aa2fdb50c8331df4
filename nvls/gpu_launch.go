package nvls

import (
	"fmt"
	"time"
	"unsafe"

	"bitalign/cuda"
)

// collective names a kernel family of collectives.cu.
type collective uint8

const (
	collAR1 collective = iota // all-reduce, one-shot
	collAR2                   // all-reduce, two-phase
	collRS                    // reduce-scatter
	collAG                    // all-gather
)

var collNames = [...]string{collAR1: "ar1", collAR2: "ar2", collRS: "rs", collAG: "ag"}

type reduceOp uint8

const (
	opSum reduceOp = iota
	opMax
)

// kernelKey picks one kernel of the module: nvls_<coll>[_<op>]_<type>_<ranks>[_v].
type kernelKey struct {
	coll collective
	op   reduceOp
	elem ElemType
	vec  bool // 16-byte packs: the pointers and chunk boundaries are 16-byte aligned
}

func (k kernelKey) name(ranks int) string {
	s := "nvls_" + collNames[k.coll]
	if k.coll != collAG {
		s += map[reduceOp]string{opSum: "_sum", opMax: "_max"}[k.op]
	}
	s += fmt.Sprintf("_%v_%d", k.elem, ranks)
	if k.vec {
		s += "_v"
	}
	return s
}

// kernelKeys lists every kernel the transport launches (22 per rank count).
func kernelKeys() []kernelKey {
	var ks []kernelKey
	for _, vec := range []bool{false, true} {
		for _, coll := range []collective{collAR1, collAR2, collRS} {
			ks = append(ks, kernelKey{coll, opSum, ElemF32, vec}, kernelKey{coll, opMax, ElemF32, vec},
				kernelKey{coll, opSum, ElemBF16, vec})
		}
		ks = append(ks, kernelKey{collAG, opSum, ElemF32, vec}, kernelKey{collAG, opSum, ElemBF16, vec})
	}
	return ks
}

// opName names the collective in errors.
func (k kernelKey) opName() string {
	switch {
	case k.coll == collAG:
		return "AllGather"
	case k.coll == collRS:
		return "ReduceScatter"
	case k.op == opMax:
		return "AllReduceMax"
	}
	return "AllReduce"
}

func kernelNames(ranks int) []string {
	var s []string
	for _, k := range kernelKeys() {
		s = append(s, k.name(ranks))
	}
	return s
}

// kernelArgs is struct Args of collectives.cu, byte for byte (192 bytes, passed by value).
type kernelArgs struct {
	scratch   [gpuMaxRanks]uint64
	flags     [gpuMaxRanks]uint64
	in        uint64
	out       uint64
	err       uint64
	n         uint64
	chunk     uint64
	timeoutNS uint64
	rank      uint32
	nranks    uint32
	epoch     uint32
	pad       uint32
}

// step is one kernel launch: one collective on at most bufBytes of scratch.
type step struct {
	key     kernelKey
	in, out cuda.Ptr // in = 0: the input is already in this call's scratch half (host-slice calls)
	n       int64    // elements in the whole message (reduce-scatter: ranks × chunk)
	chunk   int64    // elements per rank's chunk (two-phase, reduce-scatter, all-gather)
}

// nextHalf is the scratch half the next launch of this rank uses (double buffering by call parity).
func (c *GPUComm) nextHalf() cuda.Ptr {
	return c.scratch.Add(int64((c.epoch+1)%2) * c.g.cfg.Buffer)
}

// launch enqueues one step on stream s. It runs on c's device thread (x).
func (c *GPUComm) launch(x *cuda.Ctx, s *cuda.Stream, st step) error {
	if err := c.g.Err(); err != nil {
		return err
	}
	g := c.g
	half := int64((c.epoch+1)%2) * g.cfg.Buffer
	a := kernelArgs{
		in: uint64(st.in), out: uint64(st.out), err: uint64(c.ctrl) + gpuFlagWords*4,
		n: uint64(st.n), chunk: uint64(st.chunk), timeoutNS: uint64(g.timeout / time.Nanosecond),
		rank: uint32(c.rank), nranks: uint32(g.n), epoch: c.epoch + 1,
	}
	for j, p := range g.comms {
		a.scratch[j] = uint64(p.scratch) + uint64(half)
		a.flags[j] = uint64(p.ctrl)
	}
	if st.in == 0 {
		a.in = a.scratch[c.rank]
		if st.key.coll == collAG {
			a.in += uint64(int64(c.rank) * st.chunk * st.key.elem.Size())
		}
	}
	size := st.key.elem.Size()
	const align = 16
	st.key.vec = a.in%align == 0 && a.out%align == 0
	work := st.n // elements one block-partitioned loop covers
	if st.key.coll != collAR1 {
		st.key.vec = st.key.vec && st.chunk*size%align == 0
		work = st.chunk
	}
	per := int64(1)
	if st.key.vec {
		per = align / size
	}
	blocks := (work/per + gpuThreads - 1) / gpuThreads
	maxBlocks := int64(min(c.sms, gpuMaxBlocks))
	if g.cfg.MaxBlocks > 0 {
		maxBlocks = int64(min(g.cfg.MaxBlocks, gpuMaxBlocks))
	}
	blocks = max(1, min(blocks, maxBlocks))
	f := c.fns[st.key]
	if f == nil {
		return fmt.Errorf("nvls: no kernel %s", st.key.name(g.n))
	}
	c.epoch++ // the same count on every rank: the kernels meet on it
	c.lastOp = st.key.opName()
	err := x.LaunchRaw(f, cuda.Dim3{X: int(blocks)}, cuda.Dim3{X: gpuThreads}, 0, s, []unsafe.Pointer{unsafe.Pointer(&a)})
	if err != nil {
		return g.fail(fmt.Errorf("nvls: rank %d: %w", c.rank, err))
	}
	return nil
}

// check waits for stream s and turns a kernel's error word into an error (on c's device thread).
func (c *GPUComm) check(x *cuda.Ctx, s *cuda.Stream) error {
	var word uint32
	errPtr := c.ctrl.Add(gpuFlagWords * 4)
	if err := x.CopyDtoHAsync(unsafe.Pointer(&word), errPtr, 4, s); err != nil {
		return c.g.fail(fmt.Errorf("nvls: rank %d: %w", c.rank, err))
	}
	if err := x.StreamSync(s); err != nil {
		return c.g.fail(fmt.Errorf("nvls: rank %d: %w", c.rank, err))
	}
	if word == 0 {
		return nil
	}
	if word&0xFFFF0000 == gpuErrTimeoutPattern { // the kernel's barrier gave up on a peer
		return c.g.fail(&TimeoutError{Op: "GPU " + c.lastOp, Rank: c.rank, Missing: []int{int(word & 0xFF)}, After: c.g.timeout})
	}
	return c.g.fail(fmt.Errorf("nvls: rank %d: unknown kernel error word %#x", c.rank, word))
}

// ---- device-resident collectives (for an engine whose tensors live on the GPUs) ----

// AllReduceDevice enqueues on stream s (nil: the default stream) out[i] = tree over ranks of in[i], for n
// elements of type t; in and out are on this rank's GPU and may be the same buffer. Every rank must make the
// same call. Call it on this rank's device thread (x). A peer that never arrives is reported by Wait.
func (c *GPUComm) AllReduceDevice(x *cuda.Ctx, s *cuda.Stream, out, in cuda.Ptr, n int64, t ElemType) error {
	return c.allReduceDevice(x, s, out, in, n, t, opSum)
}

// AllReduceMaxDevice is AllReduceDevice with max (docs/arithmetic.md §12) for float32.
func (c *GPUComm) AllReduceMaxDevice(x *cuda.Ctx, s *cuda.Stream, out, in cuda.Ptr, n int64) error {
	return c.allReduceDevice(x, s, out, in, n, ElemF32, opMax)
}

func (c *GPUComm) allReduceDevice(x *cuda.Ctx, s *cuda.Stream, out, in cuda.Ptr, n int64, t ElemType, op reduceOp) error {
	if in == 0 || out == 0 {
		return fmt.Errorf("nvls: rank %d: all-reduce of a null device pointer", c.rank)
	}
	piece := c.g.cfg.Buffer / t.Size()
	for off := int64(0); off < n; off += piece {
		m := min(piece, n-off)
		st := c.allReduceStep(m, t, op)
		st.in, st.out = in.Add(off*t.Size()), out.Add(off*t.Size())
		if err := c.launch(x, s, st); err != nil {
			return err
		}
	}
	return nil
}

// allReduceStep chooses the kernel for an all-reduce of m elements (the choice changes no bits).
func (c *GPUComm) allReduceStep(m int64, t ElemType, op reduceOp) step {
	coll := collAR1
	switch c.g.cfg.Algo {
	case AlgoTwoPhase:
		coll = collAR2
	case AlgoAuto:
		if m*t.Size() > c.g.cfg.OneShotMax && c.g.n > 1 {
			coll = collAR2
		}
	}
	st := step{key: kernelKey{coll: coll, op: op, elem: t}, n: m}
	if coll == collAR2 {
		per := 16 / t.Size() // chunks start on 16-byte boundaries, so the packed kernels can run
		st.chunk = ((m+int64(c.g.n)-1)/int64(c.g.n) + per - 1) / per * per
	}
	return st
}

// ReduceScatterDevice enqueues out[i] = tree over ranks of in[rank·n + i] for i < n: in holds Size()·n
// elements, out n. Size()·n·t.Size() must fit the scratch (WithGPUBuffer).
func (c *GPUComm) ReduceScatterDevice(x *cuda.Ctx, s *cuda.Stream, out, in cuda.Ptr, n int64, t ElemType) error {
	if int64(c.g.n)*n*t.Size() > c.g.cfg.Buffer {
		return fmt.Errorf("nvls: rank %d: reduce-scatter of %d×%d %v elements exceeds the %d-byte GPU buffer", c.rank, c.g.n, n, t, c.g.cfg.Buffer)
	}
	if in == 0 || out == 0 {
		return fmt.Errorf("nvls: rank %d: reduce-scatter of a null device pointer", c.rank)
	}
	return c.launch(x, s, step{key: kernelKey{coll: collRS, elem: t}, in: in, out: out, n: int64(c.g.n) * n, chunk: n})
}

// AllGatherDevice enqueues out[r·n + i] = rank r's in[i] for every rank r and i < n. Size()·n·t.Size() must
// fit the scratch.
func (c *GPUComm) AllGatherDevice(x *cuda.Ctx, s *cuda.Stream, out, in cuda.Ptr, n int64, t ElemType) error {
	if int64(c.g.n)*n*t.Size() > c.g.cfg.Buffer {
		return fmt.Errorf("nvls: rank %d: all-gather of %d×%d %v elements exceeds the %d-byte GPU buffer", c.rank, c.g.n, n, t, c.g.cfg.Buffer)
	}
	if in == 0 || out == 0 {
		return fmt.Errorf("nvls: rank %d: all-gather of a null device pointer", c.rank)
	}
	return c.launch(x, s, step{key: kernelKey{coll: collAG, elem: t}, in: in, out: out, n: int64(c.g.n) * n, chunk: n})
}

// Wait waits for stream s and reports a collective's failure (a *TimeoutError, a kernel fault).
func (c *GPUComm) Wait(x *cuda.Ctx, s *cuda.Stream) error { return c.check(x, s) }

// ---- Comm on host slices: copy in, one kernel per piece, copy out ----

// AllReduce sums buf over ranks in place (tree order), identical bits on every rank.
func (c *GPUComm) AllReduce(buf []float32) error { return hostAllReduce(c, buf, opSum) }

// AllReduceMax takes the element-wise max over ranks in place (docs/arithmetic.md §12).
func (c *GPUComm) AllReduceMax(buf []float32) error { return hostAllReduce(c, buf, opMax) }

// AllReduceBF16 sums bf16 values (as uint16 bits) over ranks in place: float32 tree, one rounding.
func (c *GPUComm) AllReduceBF16(buf []uint16) error { return hostAllReduce(c, buf, opSum) }

func hostAllReduce[T float32 | uint16](c *GPUComm, buf []T, op reduceOp) error {
	t := ElemF32
	if _, ok := any(buf).([]uint16); ok {
		t = ElemBF16
	}
	piece := int(c.g.cfg.Buffer / t.Size())
	for off := 0; off < len(buf); off += piece {
		p := buf[off:min(off+piece, len(buf))]
		bytes := int64(len(p)) * t.Size()
		err := c.dev.Do(func(x *cuda.Ctx) error {
			if err := c.g.Err(); err != nil {
				return err
			}
			if err := x.CopyHtoDAsync(c.nextHalf(), unsafe.Pointer(&p[0]), bytes, c.stream); err != nil {
				return c.g.fail(err)
			}
			st := c.allReduceStep(int64(len(p)), t, op)
			st.out = c.result
			if err := c.launch(x, c.stream, st); err != nil {
				return err
			}
			if err := x.CopyDtoHAsync(unsafe.Pointer(&p[0]), c.result, bytes, c.stream); err != nil {
				return c.g.fail(err)
			}
			return c.check(x, c.stream)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ReduceScatter sets out to this rank's slice [rank·len(out), (rank+1)·len(out)) of the all-reduce of in
// (len(in) = Size()·len(out)), with the same bits as AllReduce.
func (c *GPUComm) ReduceScatter(out, in []float32) error {
	n := c.g.n
	if len(in) != n*len(out) {
		return fmt.Errorf("nvls: rank %d: reduce-scatter of %d elements into %d: want %d = %d ranks × %d", c.rank, len(in), len(out), n*len(out), n, len(out))
	}
	m := len(out)
	piece := int(c.g.cfg.Buffer / 4 / int64(n))
	for off := 0; off < m; off += piece {
		k := min(piece, m-off)
		err := c.dev.Do(func(x *cuda.Ctx) error {
			if err := c.g.Err(); err != nil {
				return err
			}
			half := c.nextHalf()
			for r := 0; r < n; r++ { // rank r's piece goes to chunk r of the scratch half
				src := in[r*m+off : r*m+off+k]
				if err := x.CopyHtoDAsync(half.Add(int64(r*k)*4), unsafe.Pointer(&src[0]), int64(k)*4, c.stream); err != nil {
					return c.g.fail(err)
				}
			}
			if err := c.launch(x, c.stream, step{key: kernelKey{coll: collRS, elem: ElemF32}, out: c.result, n: int64(n * k), chunk: int64(k)}); err != nil {
				return err
			}
			if err := x.CopyDtoHAsync(unsafe.Pointer(&out[off]), c.result, int64(k)*4, c.stream); err != nil {
				return c.g.fail(err)
			}
			return c.check(x, c.stream)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// AllGather sets out to every rank's in, in rank order (len(out) = Size()·len(in)).
func (c *GPUComm) AllGather(out, in []float32) error {
	n := c.g.n
	if len(out) != n*len(in) {
		return fmt.Errorf("nvls: rank %d: all-gather of %d elements into %d: want %d = %d ranks × %d", c.rank, len(in), len(out), n*len(in), n, len(in))
	}
	m := len(in)
	piece := int(c.g.cfg.Buffer / 4 / int64(n))
	for off := 0; off < m; off += piece {
		k := min(piece, m-off)
		err := c.dev.Do(func(x *cuda.Ctx) error {
			if err := c.g.Err(); err != nil {
				return err
			}
			half := c.nextHalf()
			if err := x.CopyHtoDAsync(half.Add(int64(c.rank*k)*4), unsafe.Pointer(&in[off]), int64(k)*4, c.stream); err != nil {
				return c.g.fail(err)
			}
			if err := c.launch(x, c.stream, step{key: kernelKey{coll: collAG, elem: ElemF32}, out: c.result, n: int64(n * k), chunk: int64(k)}); err != nil {
				return err
			}
			for r := 0; r < n; r++ {
				if err := x.CopyDtoHAsync(unsafe.Pointer(&out[r*m+off]), c.result.Add(int64(r*k)*4), int64(k)*4, c.stream); err != nil {
					return c.g.fail(err)
				}
			}
			return c.check(x, c.stream)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

package nvls

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"bitalign/cuda"
)

// collective names a kernel family of collectives.cu.
type collective uint8

const (
	collAR1 collective = iota // all-reduce, one-shot: peer loads
	collARP                   // all-reduce, one-shot: pushes into the peers' scratch, local loads
	collAR2                   // all-reduce, two-phase
	collRS                    // reduce-scatter
	collAG                    // all-gather
)

var collNames = [...]string{collAR1: "ar1", collARP: "arp", collAR2: "ar2", collRS: "rs", collAG: "ag"}

type reduceOp uint8

const (
	opSum reduceOp = iota
	opMax
)

// accessMode is a kernel's MODE in collectives.cu. The partition of a message over thread blocks (by 16-byte
// packs or by elements) must be the same on every rank, so it depends only on the sizes; this rank's pointer
// alignment only chooses between the two packed modes.
type accessMode uint8

const (
	modeElem  accessMode = iota // MODE_ELEM: a chunk that is not a whole number of packs
	modePack                    // MODE_PACK: packs, this rank's in and out 16-byte aligned
	modePackU                   // MODE_PACK_U: packs, in or out unaligned (element-wise access to them)
)

var modeSuffix = [...]string{modeElem: "", modePack: "_v", modePackU: "_vu"}

// kernelKey picks one kernel of the module: nvls_<coll>[_<op>]_<type>_<ranks>[_v|_vu].
type kernelKey struct {
	coll collective
	op   reduceOp
	elem ElemType
	mode accessMode
}

func (k kernelKey) name(ranks int) string {
	s := "nvls_" + collNames[k.coll]
	if k.coll != collAG {
		s += map[reduceOp]string{opSum: "_sum", opMax: "_max"}[k.op]
	}
	return s + fmt.Sprintf("_%v_%d", k.elem, ranks) + modeSuffix[k.mode]
}

// kernelKeys lists every kernel the transport launches (42 per rank count).
func kernelKeys() []kernelKey {
	var ks []kernelKey
	for _, m := range []accessMode{modeElem, modePack, modePackU} {
		for _, coll := range []collective{collAR1, collARP, collAR2, collRS} {
			ks = append(ks, kernelKey{coll, opSum, ElemF32, m}, kernelKey{coll, opMax, ElemF32, m},
				kernelKey{coll, opSum, ElemBF16, m})
		}
		ks = append(ks, kernelKey{collAG, opSum, ElemF32, m}, kernelKey{collAG, opSum, ElemBF16, m})
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
	sig       uint32 // callSig: ranks that disagree on the call stop with an error instead of mixing data
}

// callSig hashes what every rank must agree on for one launch (FNV-1a).
func callSig(k kernelKey, packed bool, n, chunk int64) uint32 {
	p := uint64(0)
	if packed {
		p = 1
	}
	h := uint32(2166136261)
	for _, v := range []uint64{uint64(k.coll), uint64(k.op), uint64(k.elem), p, uint64(n), uint64(chunk)} {
		for i := 0; i < 8; i++ {
			h ^= uint32(v >> (8 * i) & 0xFF)
			h *= 16777619
		}
	}
	return h
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

// inputOffset is where in its scratch half a step reads this rank's input when it is already there: the
// rank's own chunk for all-gather, its own slot (one no peer writes) for the push all-reduce, else the start.
func (c *GPUComm) inputOffset(st step) int64 {
	if st.key.coll == collAG || st.key.coll == collARP {
		return int64(c.rank) * st.chunk * st.key.elem.Size()
	}
	return 0
}

// launch enqueues one step on stream s. It runs on c's device thread (x).
func (c *GPUComm) launch(x *cuda.Ctx, s *cuda.Stream, st step) error {
	if err := c.g.Err(); err != nil {
		return err
	}
	g := c.g
	half := int64((c.epoch+1)%2) * g.cfg.Buffer
	a := kernelArgs{
		in: uint64(st.in), out: uint64(st.out), err: uint64(c.ctrl) + gpuFlagBytes,
		n: uint64(st.n), chunk: uint64(st.chunk), timeoutNS: uint64(g.timeout / time.Nanosecond),
		rank: uint32(c.rank), nranks: uint32(g.n), epoch: c.epoch + 1,
	}
	for j, p := range g.comms {
		a.scratch[j] = uint64(p.scratch) + uint64(half)
		a.flags[j] = uint64(p.ctrl)
	}
	if st.in == 0 {
		a.in = a.scratch[c.rank] + uint64(c.inputOffset(st))
	}
	// The partition over blocks, and so the grid, depends only on sizes shared by every rank.
	size := st.key.elem.Size()
	const align = 16
	work, packed := st.n, true // elements one block-partitioned loop covers
	if st.key.coll != collAR1 && st.key.coll != collARP {
		work = st.chunk
		packed = st.chunk*size%align == 0 // two-phase chunks are rounded up to packs: always
	}
	per := int64(1)
	st.key.mode = modeElem
	if packed {
		per = align / size
		st.key.mode = modePackU
		if a.in%align == 0 && a.out%align == 0 {
			st.key.mode = modePack
		}
	}
	blocks := max(1, min((work/per+gpuThreads-1)/gpuThreads, int64(g.maxBlocks)))
	a.sig = callSig(st.key, packed, st.n, st.chunk)
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
// Copies go through page-locked memory and the wait is cuStreamSynchronize: a copy to pageable memory would
// block inside the driver until the kernel, which may be waiting for another rank, is done.
func (c *GPUComm) check(x *cuda.Ctx, s *cuda.Stream) error {
	errHost := unsafe.Pointer(&c.pinned[c.g.cfg.Buffer])
	if err := x.CopyDtoHAsync(errHost, c.ctrl.Add(gpuFlagBytes), 4, s); err != nil {
		return c.g.fail(fmt.Errorf("nvls: rank %d: %w", c.rank, err))
	}
	if err := x.StreamSync(s); err != nil {
		return c.g.fail(fmt.Errorf("nvls: rank %d: %w", c.rank, err))
	}
	word := atomic.LoadUint32((*uint32)(errHost))
	if word == 0 {
		return nil
	}
	if word&0xFFFF0000 == gpuErrTimeoutPattern { // the kernel's barrier gave up on a peer
		return c.g.fail(&TimeoutError{Op: "GPU " + c.lastOp, Rank: c.rank, Missing: []int{int(word & 0xFF)}, After: c.g.timeout})
	}
	if word&0xFFFF0000 == gpuErrMismatchPattern {
		return c.g.fail(fmt.Errorf("nvls: GPU %s on rank %d: rank %d arrived with another collective, type or length (every rank must make the same calls); the group is unusable",
			c.lastOp, c.rank, word&0xFF))
	}
	return c.g.fail(fmt.Errorf("nvls: rank %d: unknown kernel error word %#x", c.rank, word))
}

// ---- device-resident collectives (for an engine whose tensors live on the GPUs) ----

// AllReduceDevice enqueues on stream s (nil: the default stream) out[i] = tree over ranks of in[i], for n
// elements of type t; in and out are on this rank's GPU and may be the same buffer. Every rank must make the
// same calls in the same order, and one rank's collectives must run in that order (one stream, or streams
// ordered by events): the scratch is double-buffered on that order. Call it on this rank's device thread (x).
// A peer that never arrives is reported by Wait. An input already in NextInput(n, t) is not copied.
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
	piece := c.allReducePiece(t)
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

// NextInput returns where the next all-reduce of n elements of type t on this rank reads its input from
// (0 when n needs several pieces): an engine that writes its partial sums there and passes it as in saves the
// peer-load one-shot kernel (AlgoOneShot) its copy into scratch (64 MiB: 251 → 209 µs on 2×H200); the push
// and two-phase kernels copy nothing anyway. Valid until that call is enqueued, and written by work ordered
// after this rank's previous collective.
func (c *GPUComm) NextInput(n int64, t ElemType) cuda.Ptr {
	if n > c.allReducePiece(t) {
		return 0
	}
	st := c.allReduceStep(n, t, opSum)
	return c.nextHalf().Add(c.inputOffset(st))
}

// allReducePiece is the most elements one all-reduce kernel takes (larger messages run in pieces).
func (c *GPUComm) allReducePiece(t ElemType) int64 {
	piece := c.g.cfg.Buffer / t.Size()
	if c.g.cfg.Algo == AlgoPush { // every rank's slot must fit
		piece = piece / int64(c.g.n) / 8 * 8
	}
	return piece
}

// allReduceStep chooses the kernel for an all-reduce of m elements (the choice changes no bits).
func (c *GPUComm) allReduceStep(m int64, t ElemType, op reduceOp) step {
	per := 16 / t.Size() // chunks and slots start on 16-byte boundaries, so the packed kernels can run
	slot := (m + per - 1) / per * per
	coll := collAR1
	switch c.g.cfg.Algo {
	case AlgoTwoPhase:
		coll = collAR2
	case AlgoPush:
		coll = collARP
	case AlgoAuto: // push (peer loads when its slots do not fit) up to OneShotMax, two-phase above
		coll = collARP
		if m*t.Size() > c.g.cfg.OneShotMax && c.g.n > 1 {
			coll = collAR2
		}
	}
	if coll == collARP && int64(c.g.n)*slot*t.Size() > c.g.cfg.Buffer {
		coll = collAR1 // the slots do not fit: the peer-load one-shot kernel, same bits
	}
	st := step{key: kernelKey{coll: coll, op: op, elem: t}, n: m}
	switch coll {
	case collAR2:
		st.chunk = ((m+int64(c.g.n)-1)/int64(c.g.n) + per - 1) / per * per
	case collARP:
		st.chunk = slot
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

// ---- Comm on host slices: copy through page-locked staging, one kernel per piece ----

// AllReduce sums buf over ranks in place (tree order), identical bits on every rank.
func (c *GPUComm) AllReduce(buf []float32) error { return hostAllReduce(c, buf, opSum) }

// AllReduceMax takes the element-wise max over ranks in place (docs/arithmetic.md §12).
func (c *GPUComm) AllReduceMax(buf []float32) error { return hostAllReduce(c, buf, opMax) }

// AllReduceBF16 sums bf16 values (as uint16 bits) over ranks in place: float32 tree, one rounding.
func (c *GPUComm) AllReduceBF16(buf []uint16) error { return hostAllReduce(c, buf, opSum) }

// staging views the first n elements of the page-locked buffer as T.
func staging[T float32 | uint16](c *GPUComm, n int) []T {
	return unsafe.Slice((*T)(unsafe.Pointer(&c.pinned[0])), n)
}

func hostAllReduce[T float32 | uint16](c *GPUComm, buf []T, op reduceOp) error {
	t := ElemF32
	if _, ok := any(buf).([]uint16); ok {
		t = ElemBF16
	}
	piece := int(c.allReducePiece(t))
	for off := 0; off < len(buf); off += piece {
		p := buf[off:min(off+piece, len(buf))]
		bytes := int64(len(p)) * t.Size()
		err := c.dev.Do(func(x *cuda.Ctx) error {
			if err := c.g.Err(); err != nil {
				return err
			}
			st := c.allReduceStep(int64(len(p)), t, op)
			stage := staging[T](c, len(p))
			copy(stage, p)
			if err := x.CopyHtoDAsync(c.nextHalf().Add(c.inputOffset(st)), unsafe.Pointer(&stage[0]), bytes, c.stream); err != nil {
				return c.g.fail(err)
			}
			st.out = c.result
			if err := c.launch(x, c.stream, st); err != nil {
				return err
			}
			if err := x.CopyDtoHAsync(unsafe.Pointer(&stage[0]), c.result, bytes, c.stream); err != nil {
				return c.g.fail(err)
			}
			if err := c.check(x, c.stream); err != nil {
				return err
			}
			copy(p, stage)
			return nil
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
			stage := staging[float32](c, n*k)
			for r := 0; r < n; r++ { // rank r's piece goes to chunk r of the scratch half
				copy(stage[r*k:(r+1)*k], in[r*m+off:])
			}
			if err := x.CopyHtoDAsync(c.nextHalf(), unsafe.Pointer(&stage[0]), int64(n*k)*4, c.stream); err != nil {
				return c.g.fail(err)
			}
			if err := c.launch(x, c.stream, step{key: kernelKey{coll: collRS, elem: ElemF32}, out: c.result, n: int64(n * k), chunk: int64(k)}); err != nil {
				return err
			}
			if err := x.CopyDtoHAsync(unsafe.Pointer(&stage[0]), c.result, int64(k)*4, c.stream); err != nil {
				return c.g.fail(err)
			}
			if err := c.check(x, c.stream); err != nil {
				return err
			}
			copy(out[off:off+k], stage)
			return nil
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
			stage := staging[float32](c, n*k)
			copy(stage, in[off:off+k])
			if err := x.CopyHtoDAsync(c.nextHalf().Add(int64(c.rank*k)*4), unsafe.Pointer(&stage[0]), int64(k)*4, c.stream); err != nil {
				return c.g.fail(err)
			}
			if err := c.launch(x, c.stream, step{key: kernelKey{coll: collAG, elem: ElemF32}, out: c.result, n: int64(n * k), chunk: int64(k)}); err != nil {
				return err
			}
			if err := x.CopyDtoHAsync(unsafe.Pointer(&stage[0]), c.result, int64(n*k)*4, c.stream); err != nil {
				return c.g.fail(err)
			}
			if err := c.check(x, c.stream); err != nil {
				return err
			}
			for r := 0; r < n; r++ {
				copy(out[r*m+off:r*m+off+k], stage[r*k:(r+1)*k])
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

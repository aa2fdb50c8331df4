package engine

import (
	"encoding/binary"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"bitalign/capture"
	"bitalign/internal/par"
)

// recorder writes one rank's capture file: every op output per sequence, over the positions of each forward.
//
// The forward only downloads: each recorded op's buffer comes to the host in one copy (all the forward's
// segments at once) and is handed to the recorder's writer goroutine, which encodes it (its rows in parallel),
// fingerprints it when asked and writes the tensors in the order they were submitted, while the forward goes
// on with the next ops. At most recordBudget bytes of downloaded rows wait for the writer (one larger buffer is
// let through alone), so memory stays bounded whatever the model's size. The file is the one the synchronous
// writer wrote: the same tensors in the same order.
type recorder struct {
	w    *capture.Writer
	cfg  Config
	step int64
	idx  map[string]int32
	want func(op string) bool // which ops are written; nil: all
	fps  func(op string) bool // which of them as fingerprints only (RunOptions.Fingerprints); nil: none
	ph   *Phases

	jobs chan recJob
	done chan struct{}
	mu   sync.Mutex
	cond *sync.Cond
	busy int64 // bytes submitted and not yet written
	err  error // the writer's first error (under mu)
}

// recJob is one submitted write: bytes of host memory it holds until run returns.
type recJob struct {
	bytes int64
	run   func() error
	free  func() // nil, or gives back memory the job holds outside the budget (run or not)
}

// recordBudget bounds the downloaded bytes waiting for the writer goroutine.
const recordBudget = 1 << 30

// newRecorder creates DIR/rankN.arrow for one rank and starts its writer goroutine.
func newRecorder(dir string, cfg Config, rank int, meta capture.Meta, want, fps func(op string) bool, ph *Phases) (*recorder, error) {
	meta.Rank = rank
	w, err := capture.Create(filepath.Join(dir, "rank"+strconv.Itoa(rank)+".arrow"), meta)
	if err != nil {
		return nil, err
	}
	idx := map[string]int32{}
	for i, op := range OpNames(cfg) {
		idx[op] = int32(i)
	}
	rec := &recorder{w: w, cfg: cfg, step: meta.Step, idx: idx, want: want, fps: fps, ph: ph,
		jobs: make(chan recJob, 256), done: make(chan struct{})}
	rec.cond = sync.NewCond(&rec.mu)
	go rec.writer()
	return rec, nil
}

// writer runs the submitted jobs in order; after the first error it only releases their memory.
func (rec *recorder) writer() {
	defer close(rec.done)
	for j := range rec.jobs {
		rec.mu.Lock()
		failed := rec.err != nil
		rec.mu.Unlock()
		var err error
		if !failed {
			err = j.run()
		}
		if j.free != nil {
			j.free()
		}
		rec.mu.Lock()
		if err != nil && rec.err == nil {
			rec.err = err
		}
		rec.busy -= j.bytes
		rec.cond.Broadcast()
		rec.mu.Unlock()
	}
}

// submit queues run, which holds bytes of host memory, behind the writes already queued; it waits while the
// queue holds recordBudget bytes. It returns the writer's first error, if any (then run is not queued).
func (rec *recorder) submit(bytes int64, run func() error) error {
	return rec.submitFree(bytes, run, nil)
}

// submitFree is submit with free, called by the writer after run (or instead of it after an error), also when
// the job is refused here.
func (rec *recorder) submitFree(bytes int64, run func() error, free func()) error {
	start := time.Now()
	rec.mu.Lock()
	for rec.err == nil && rec.busy > 0 && rec.busy+bytes > recordBudget {
		rec.cond.Wait()
	}
	if err := rec.err; err != nil {
		rec.mu.Unlock()
		if free != nil {
			free()
		}
		return err
	}
	rec.busy += bytes
	rec.mu.Unlock()
	if bytes > 0 {
		rec.ph.Add("record: forward waits for the writer", time.Since(start), 0)
	}
	rec.jobs <- recJob{bytes: bytes, run: run, free: free}
	return nil
}

// finish waits until every queued write has run and returns the writer's first error. The writer goroutine
// has exited when it returns; finish may be called more than once.
func (rec *recorder) finish() error {
	start := time.Now()
	select {
	case <-rec.done:
	default:
		close(rec.jobs)
		<-rec.done
	}
	rec.ph.Add("record: draining the writer at the end", time.Since(start), 0)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.err
}

// write queues one small tensor whose data the caller no longer touches.
func (rec *recorder) write(t capture.Tensor) error {
	return rec.submit(0, func() error { return rec.w.Write(t) })
}

// skip reports whether op is left out of the capture (RunOptions.Ops).
func (rec *recorder) skip(op string) bool { return rec.want != nil && !rec.want(op) }

// fingerprinted reports whether op is recorded as fingerprints only (never an op of capture.FullAlways).
func (rec *recorder) fingerprinted(op string) bool {
	return rec.fps != nil && rec.fps(op) && op != OpTokens && op != OpLogprobs && op != OpSample
}

// shardOf returns the global column offset, the full width and whether this rank writes op's output.
func (rec *recorder) shardOf(lay layout, op string) (start, full int, write bool) {
	hd := rec.cfg.HeadDim
	if op == OpLogits {
		return lay.v0, rec.cfg.Vocab, true
	}
	_, s, _ := SplitLayerOp(op)
	switch s {
	case opQProj, opQNorm, opQRope, opSDPA:
		return lay.qHead0 * hd, rec.cfg.QDim(), true
	case opKProj, opVProj, opKNorm, opKRope:
		return lay.kvHead0 * hd, rec.cfg.KVDim(), lay.kvWriter // replicated kv heads: one copy
	case opGateProj, opUpProj, opAct:
		return lay.i0, rec.cfg.Intermediate, true
	}
	return 0, 0, true
}

// emit records op's output b (rows × width, packed over segs) for every segment: one download of all the
// rows, then the encoding, fingerprints and writes on the writer goroutine.
func (rec *recorder) emit(r *rank, op string, b Buf, width int, segs []segment, offs []int) error {
	if rec == nil || rec.skip(op) {
		return pendingErr(r.be)
	}
	dt := opDType(rec.cfg, op)
	shard := capture.NoShard
	if opLayout(op) == colShard && r.lay.tp > 1 {
		start, full, write := rec.shardOf(r.lay, op)
		if !write {
			return pendingErr(r.be)
		}
		shard = capture.Shard{Dim: 1, Start: int64(start)}
		shard.FullShape = []int64{0, int64(full)}
	}
	rows := 0
	for _, s := range segs {
		rows += len(s.toks)
	}
	// a shard's fingerprints are not those of the full rows: sharded ops are written in full
	asFP := rec.fingerprinted(op) && !shard.Sharded()
	segs, offs = append([]segment(nil), segs...), append([]int(nil), offs...) // the job outlives the forward's slices
	view := r.be.View(b, 0, rows*width)
	start := time.Now()
	if rf, ok := r.be.(RowFingerprinter); ok && asFP && rows*width > 0 {
		fps := make([]uint64, rows)
		done, err := rf.FingerprintRows(fps, view, rows, width, dt)
		if err != nil {
			return err
		}
		if done {
			rec.ph.Add("record: fingerprints on the device (8 bytes a row copied)", time.Since(start), int64(8*rows))
			return rec.submit(0, func() error { return rec.writeRows(r, op, dt, width, shard, segs, offs, true, nil, fps) })
		}
	}
	if ad, ok := r.be.(AsyncDownloader); ok && !asFP && rows*width > 0 {
		p, done, err := ad.StartDownload(view, dt)
		if err != nil {
			return err
		}
		if done {
			rec.ph.Add("record: device→host copies queued (pinned, side stream)", time.Since(start), int64(dt.Size()*rows*width))
			return rec.submitFree(0, func() error {
				t0 := time.Now()
				data, err := p.Wait()
				rec.ph.Add("record: writer waits for the copies", time.Since(t0), 0)
				if err != nil {
					return err
				}
				return rec.writeRows(r, op, dt, width, shard, segs, offs, false, data, nil)
			}, p.Release)
		}
	}
	var host []float32
	var bits []uint16 // bf16 ops narrowed on the device (NarrowDownloader): half the bytes, the same bits
	if nd, ok := r.be.(NarrowDownloader); ok && dt == capture.BF16 {
		bits = make([]uint16, rows*width)
		done, err := nd.DownloadBF16(bits, view)
		if err != nil {
			return err
		}
		if done {
			rec.ph.Add("record: device→host copies (bf16, narrowed there)", time.Since(start), int64(2*len(bits)))
		} else {
			bits = nil
		}
	}
	if bits == nil {
		host = make([]float32, rows*width)
		if err := r.be.Download(host, view); err != nil {
			return err
		}
		rec.ph.Add("record: device→host copies (float32)", time.Since(start), int64(4*len(host)))
	}
	held := int64(4*len(host) + 2*len(bits))
	return rec.submit(held, func() error {
		t0 := time.Now()
		var data []byte
		var fps []uint64
		if bits != nil {
			data, fps = encodeBitRows(bits, rows, width, asFP)
		} else {
			data, fps = encodeRows(dt, host, rows, width, asFP)
		}
		rec.ph.Add("record: encode (writer, parallel)", time.Since(t0), 0)
		return rec.writeRows(r, op, dt, width, shard, segs, offs, asFP, data, fps)
	})
}

// writeRows writes op's tensor of every segment (on the writer goroutine): with asFP the rows' fingerprints
// fps, else their bytes from data (rows × width values of dt, packed over segs at offs).
func (rec *recorder) writeRows(r *rank, op string, dt capture.DType, width int, shard capture.Shard, segs []segment,
	offs []int, asFP bool, data []byte, fps []uint64) error {
	t0 := time.Now()
	var written int64
	size := int64(dt.Size())
	rank := int32(r.lay.rank)
	for i, s := range segs {
		n := len(s.toks)
		t := capture.Tensor{Step: rec.step, Seq: s.seq, Pos: int64(s.start), NTok: int64(n), Op: op,
			Index: rec.idx[op], Role: "out", DType: dt, Shape: []int64{int64(n), int64(width)},
			Rank: rank, Shard: shard}
		if asFP {
			t = capture.FingerprintsOf(t, fps[offs[i]:offs[i]+n])
		} else {
			t.Data = data[int64(offs[i]*width)*size : int64((offs[i]+n)*width)*size]
			if shard.Sharded() {
				t.Shard.FullShape = []int64{int64(n), shard.FullShape[1]}
			}
		}
		if err := rec.w.Write(t); err != nil {
			return err
		}
		written += int64(len(t.Data))
	}
	rec.ph.Add("record: capture writes (writer)", time.Since(t0), written)
	return nil
}

// encodeRows encodes rows × width values as dt (encode), the rows split into chunks encoded in parallel; with
// fingerprints it returns each row's fingerprint instead (capture.FingerprintRows over each chunk's encoding)
// and no data. Float32 values on a little-endian machine are already their encoding: the bytes of xs are
// returned as they are (xs is the job's own download), no copy.
func encodeRows(dt capture.DType, xs []float32, rows, width int, fingerprints bool) ([]byte, []uint64) {
	if dt == capture.F32 && !fingerprints && len(xs) > 0 && littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 4*len(xs)), nil
	}
	return chunkRows(rows, width, dt.Size(), fingerprints, func(r0, r1 int) []byte { return encode(dt, xs[r0*width:r1*width]) })
}

// littleEndian reports whether float32 values in memory are laid out as the capture stores them.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// encodeBitRows is encodeRows for values already narrowed to bf16 bits (NarrowDownloader): little-endian bytes.
func encodeBitRows(bits []uint16, rows, width int, fingerprints bool) ([]byte, []uint64) {
	return chunkRows(rows, width, 2, fingerprints, func(r0, r1 int) []byte {
		b := make([]byte, 2*(r1-r0)*width)
		for i, v := range bits[r0*width : r1*width] {
			b[2*i], b[2*i+1] = byte(v), byte(v>>8)
		}
		return b
	})
}

// chunkRows runs enc over chunks of about 64 K values in parallel (enc(r0, r1): rows r0..r1-1 as size-byte
// values) and returns the bytes of every row, or with fingerprints only each row's fingerprint.
func chunkRows(rows, width, size int, fingerprints bool, enc func(r0, r1 int) []byte) ([]byte, []uint64) {
	if rows == 0 || width == 0 {
		if fingerprints {
			fps := make([]uint64, rows)
			for i := range fps {
				fps[i] = capture.Fingerprint(nil)
			}
			return nil, fps
		}
		return nil, nil
	}
	per := max(1, (1<<16)/width) // rows per chunk
	chunks := (rows + per - 1) / per
	var data []byte
	var fps []uint64
	if fingerprints {
		fps = make([]uint64, rows)
	} else {
		data = make([]byte, rows*width*size)
	}
	par.Each(chunks, 0, nil, func(c int) {
		r0, r1 := c*per, min((c+1)*per, rows)
		b := enc(r0, r1)
		if !fingerprints {
			copy(data[r0*width*size:], b)
			return
		}
		f, _ := capture.FingerprintRows(b, int64(r1-r0)) // r1-r0 ≥ 1 rows of width·size bytes each
		copy(fps[r0:], f)
	})
	return data, fps
}

// emitHost records a replicated per-token op whose rows (width values each, packed over segs) are on the host:
// ints for I32, else floats (the MoE routing).
func (rec *recorder) emitHost(r *rank, op string, dt capture.DType, width int, segs []segment, offs []int, floats []float32, ints []int32) error {
	if rec == nil || rec.skip(op) {
		return pendingErr(r.be)
	}
	for i, s := range segs {
		n := len(s.toks)
		t := capture.Tensor{Step: rec.step, Seq: s.seq, Pos: int64(s.start), NTok: int64(n), Op: op,
			Index: rec.idx[op], Role: "out", DType: dt, Shape: []int64{int64(n), int64(width)},
			Rank: int32(r.lay.rank), Shard: capture.NoShard}
		if dt == capture.I32 {
			t.Data = encodeI32(ints[offs[i]*width : (offs[i]+n)*width])
		} else {
			t.Data = encode(dt, floats[offs[i]*width:(offs[i]+n)*width])
		}
		if rec.fingerprinted(op) {
			var err error
			if t, err = capture.FingerprintTensor(t); err != nil {
				return err
			}
		}
		if err := rec.write(t); err != nil {
			return err
		}
	}
	return nil
}

// emitTokens records the input token ids of every segment.
func (rec *recorder) emitTokens(r *rank, segs []segment) error {
	if rec == nil || rec.skip(OpTokens) {
		return nil
	}
	for _, s := range segs {
		if err := rec.writeI32(r.lay.rank, OpTokens, s.seq, s.start, s.toks); err != nil {
			return err
		}
	}
	return nil
}

func (rec *recorder) writeI32(rank int, op string, seq int64, pos int, vals []int32) error {
	if rec.skip(op) {
		return nil
	}
	return rec.write(capture.Tensor{Step: rec.step, Seq: seq, Pos: int64(pos), NTok: int64(len(vals)), Op: op,
		Index: rec.idx[op], Role: "out", DType: capture.I32, Shape: []int64{int64(len(vals))},
		Rank: int32(rank), Shard: capture.NoShard, Data: encodeI32(vals)})
}

func (rec *recorder) writeF32(rank int, op string, seq int64, pos int, vals []float32) error {
	if rec.skip(op) {
		return nil
	}
	return rec.write(capture.Tensor{Step: rec.step, Seq: seq, Pos: int64(pos), NTok: int64(len(vals)), Op: op,
		Index: rec.idx[op], Role: "out", DType: capture.F32, Shape: []int64{int64(len(vals))},
		Rank: int32(rank), Shard: capture.NoShard, Data: encode(capture.F32, vals)})
}

// pendingErr is the backend's first error recorded so far, without Err's wait (a CUDA backend's Err waits
// for the device thread to launch every queued op): the recorder's per-op check of a forward that records
// nothing must not turn the launch queue back into a round trip per op. The forward's end calls Err.
func pendingErr(be Backend) error {
	if p, ok := be.(interface{ failure() error }); ok {
		return p.failure()
	}
	return be.Err()
}

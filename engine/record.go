package engine

import (
	"path/filepath"
	"strconv"

	"bitalign/capture"
)

// recorder writes one rank's capture file: every op output per sequence, over the positions of each forward.
type recorder struct {
	w    *capture.Writer
	cfg  Config
	step int64
	idx  map[string]int32
	want func(op string) bool // which ops are written; nil: all
}

// newRecorder creates DIR/rankN.arrow for one rank.
func newRecorder(dir string, cfg Config, rank int, meta capture.Meta, want func(op string) bool) (*recorder, error) {
	meta.Rank = rank
	w, err := capture.Create(filepath.Join(dir, "rank"+strconv.Itoa(rank)+".arrow"), meta)
	if err != nil {
		return nil, err
	}
	idx := map[string]int32{}
	for i, op := range OpNames(cfg) {
		idx[op] = int32(i)
	}
	return &recorder{w: w, cfg: cfg, step: meta.Step, idx: idx, want: want}, nil
}

// skip reports whether op is left out of the capture (RunOptions.Ops).
func (rec *recorder) skip(op string) bool { return rec.want != nil && !rec.want(op) }

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

// emit records op's output b (rows × width, packed over segs) for every segment.
func (rec *recorder) emit(r *rank, op string, b Buf, width int, segs []segment, offs []int) error {
	if rec == nil || rec.skip(op) {
		return r.be.Err()
	}
	dt := opDType(rec.cfg, op)
	shard := capture.NoShard
	if opLayout(op) == colShard && r.lay.tp > 1 {
		start, full, write := rec.shardOf(r.lay, op)
		if !write {
			return r.be.Err()
		}
		shard = capture.Shard{Dim: 1, Start: int64(start)}
		shard.FullShape = []int64{0, int64(full)}
	}
	for i, s := range segs {
		n := len(s.toks)
		host := make([]float32, n*width)
		if err := r.be.Download(host, r.be.View(b, offs[i]*width, n*width)); err != nil {
			return err
		}
		t := capture.Tensor{Step: rec.step, Seq: s.seq, Pos: int64(s.start), NTok: int64(n), Op: op,
			Index: rec.idx[op], Role: "out", DType: dt, Shape: []int64{int64(n), int64(width)},
			Rank: int32(r.lay.rank), Shard: shard, Data: encode(dt, host)}
		if shard.Sharded() {
			t.Shard.FullShape = []int64{int64(n), shard.FullShape[1]}
		}
		if err := rec.w.Write(t); err != nil {
			return err
		}
	}
	return nil
}

// emitHost records a replicated per-token op whose rows (width values each, packed over segs) are on the host:
// ints for I32, else floats (the MoE routing).
func (rec *recorder) emitHost(r *rank, op string, dt capture.DType, width int, segs []segment, offs []int, floats []float32, ints []int32) error {
	if rec == nil || rec.skip(op) {
		return r.be.Err()
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
		if err := rec.w.Write(t); err != nil {
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
	return rec.w.Write(capture.Tensor{Step: rec.step, Seq: seq, Pos: int64(pos), NTok: int64(len(vals)), Op: op,
		Index: rec.idx[op], Role: "out", DType: capture.I32, Shape: []int64{int64(len(vals))},
		Rank: int32(rank), Shard: capture.NoShard, Data: encodeI32(vals)})
}

func (rec *recorder) writeF32(rank int, op string, seq int64, pos int, vals []float32) error {
	if rec.skip(op) {
		return nil
	}
	return rec.w.Write(capture.Tensor{Step: rec.step, Seq: seq, Pos: int64(pos), NTok: int64(len(vals)), Op: op,
		Index: rec.idx[op], Role: "out", DType: capture.F32, Shape: []int64{int64(len(vals))},
		Rank: int32(rank), Shard: capture.NoShard, Data: encode(capture.F32, vals)})
}

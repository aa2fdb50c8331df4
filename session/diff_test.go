package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/capture"
)

func meta(side string, tp, rank int) capture.Meta {
	return capture.Meta{FormatVersion: 1, Side: side, TP: tp, PP: 1, DP: 1, Rank: rank, KernelProfile: "canonical",
		BatchSize: 2, Seed: 1, Producer: "session tests", Model: []byte(`{"architecture":"llama"}`)}
}

// writeCapture writes ts to path (a file; for tp > 1 a directory of rank files, each tensor going to its
// Rank's file) and opens it.
func writeCapture(t testing.TB, path, side string, tp int, ts []capture.Tensor) *capture.Capture {
	t.Helper()
	if tp <= 1 {
		if err := capture.WriteAll(path, meta(side, 1, 0), ts); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := os.MkdirAll(path, 0o755); err != nil {
			t.Fatal(err)
		}
		for r := 0; r < tp; r++ {
			var mine []capture.Tensor
			for _, x := range ts {
				if int(x.Rank) == r {
					mine = append(mine, x)
				}
			}
			if err := capture.WriteAll(filepath.Join(path, "rank"+string(rune('0'+r))+".arrow"), meta(side, tp, r), mine); err != nil {
				t.Fatal(err)
			}
		}
	}
	return openTestCapture(t, path)
}

// openTestCapture opens the capture at path, closed when the test ends.
func openTestCapture(tb testing.TB, path string) *capture.Capture {
	tb.Helper()
	c, err := capture.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// activation is a deterministic bf16 tensor [n, h] of (seq, op) at positions [pos, pos+n): the value of
// (pos p, feature j) depends only on (seq, op, p, j), so any layout of the same positions holds equal bytes.
func activation(seq int64, opSalt uint64, pos, n, h int64) []byte {
	out := make([]byte, n*h*2)
	for r := int64(0); r < n; r++ {
		for j := int64(0); j < h; j++ {
			x := uint64(seq)*1_000_003 + opSalt*7919 + uint64(pos+r)*131 + uint64(j)
			x ^= x >> 7
			x *= 0x9e3779b97f4a7c15
			v := uint16(0x3c00 + (x>>40)%0x0400) // positive, ordinary
			binary.LittleEndian.PutUint16(out[(r*h+j)*2:], v)
		}
	}
	return out
}

func tensor(op string, index int32, role string, seq, pos, n, h int64, data []byte) capture.Tensor {
	return capture.Tensor{Step: 0, Seq: seq, Pos: pos, NTok: n, Op: op, Index: index, Role: role,
		DType: capture.BF16, Shape: []int64{n, h}, Shard: capture.NoShard, Data: data}
}

// prefill is the trainer's layout: one [T, H] tensor per sequence and op.
func prefill(ops []string, seqs, T, H int64) []capture.Tensor {
	var ts []capture.Tensor
	for i, op := range ops {
		for s := int64(0); s < seqs; s++ {
			ts = append(ts, tensor(op, int32(i), "out", s, 0, T, H, activation(s, uint64(i), 0, T, H)))
		}
	}
	return ts
}

// decode is the sampler's layout: a prompt of P tokens in one tensor, then one tensor per token.
func decode(ops []string, seqs, T, H, P int64) []capture.Tensor {
	var ts []capture.Tensor
	for s := int64(0); s < seqs; s++ {
		for i, op := range ops {
			ts = append(ts, tensor(op, int32(i), "out", s, 0, P, H, activation(s, uint64(i), 0, P, H)))
		}
		for p := P; p < T; p++ {
			for i, op := range ops {
				ts = append(ts, tensor(op, int32(i), "out", s, p, 1, H, activation(s, uint64(i), p, 1, H)))
			}
		}
	}
	return ts
}

var testOps = []string{"embed", "layers.0.attn_norm", "layers.0.attn.q_proj", "layers.0.attn_residual"}

func flipBit(data []byte, elem int64, bit uint) {
	v := binary.LittleEndian.Uint16(data[elem*2:])
	binary.LittleEndian.PutUint16(data[elem*2:], v^uint16(1)<<bit)
}

func TestDiffPrefillVsDecodeIdentical(t *testing.T) {
	dir := t.TempDir()
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, prefill(testOps, 3, 12, 40))
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, decode(testOps, 3, 12, 40, 5))
	rep, err := Diff(context.Background(), a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Identical || rep.First != nil || len(rep.Missing) != 0 {
		t.Fatalf("want identical, got identical=%v first=%+v missing=%v", rep.Identical, rep.First, rep.Missing)
	}
	if len(rep.Ops) != len(testOps) {
		t.Fatalf("%d ops, want %d", len(rep.Ops), len(testOps))
	}
	for i, o := range rep.Ops {
		if o.Op != testOps[i] || o.Status != StatusIdentical || o.Elements != 3*12*40 {
			t.Errorf("op %d: %s %s %d elements", i, o.Op, o.Status, o.Elements)
		}
	}
}

// plantedFlip flips bit of testOps[op]'s value at sequence seq, position pos, feature feat, in B.
type plantedFlip struct {
	op       int
	seq, pos int64
	feat     int64
	bit      uint
}

func TestDiffFirstDivergence(t *testing.T) {
	// flips planted in B (decode layout): the first in execution order must win, not the first in the file
	cases := []struct {
		name                       string
		flips                      []plantedFlip
		wantOp                     string
		wantSeq, wantPos, wantFeat int64
		wantULP                    uint64
	}{
		{name: "single", flips: []plantedFlip{{2, 1, 7, 13, 0}}, wantOp: "layers.0.attn.q_proj", wantSeq: 1, wantPos: 7, wantFeat: 13, wantULP: 1},
		{name: "earliest position wins", flips: []plantedFlip{{3, 1, 4, 0, 5}, {1, 1, 6, 39, 3}}, wantOp: "layers.0.attn_residual", wantSeq: 1, wantPos: 4, wantFeat: 0, wantULP: 32},
		{name: "earliest op at one position wins", flips: []plantedFlip{{3, 2, 9, 0, 5}, {1, 2, 9, 39, 3}, {1, 2, 10, 0, 3}}, wantOp: "layers.0.attn_norm", wantSeq: 2, wantPos: 9, wantFeat: 39, wantULP: 8},
		{name: "earliest sequence wins", flips: []plantedFlip{{1, 2, 1, 0, 3}, {3, 0, 11, 1, 3}}, wantOp: "layers.0.attn_residual", wantSeq: 0, wantPos: 11, wantFeat: 1, wantULP: 8},
		{name: "in prompt", flips: []plantedFlip{{0, 0, 3, 2, 15}}, wantOp: "embed", wantSeq: 0, wantPos: 3, wantFeat: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bt := decode(testOps, 3, 12, 40, 5)
			for _, fl := range tc.flips {
				for _, x := range bt {
					if x.Op == testOps[fl.op] && x.Seq == fl.seq && fl.pos >= x.Pos && fl.pos < x.Pos+x.NTok {
						flipBit(x.Data, (fl.pos-x.Pos)*40+fl.feat, fl.bit)
					}
				}
			}
			a := writeCapture(t, dir+"/a.arrow", "trainer", 1, prefill(testOps, 3, 12, 40))
			b := writeCapture(t, dir+"/b.arrow", "sampler", 1, bt)
			rep, err := Diff(context.Background(), a, b)
			if err != nil {
				t.Fatal(err)
			}
			f := rep.First
			if rep.Identical || f == nil {
				t.Fatal("no divergence found")
			}
			if f.Op != tc.wantOp || f.At.Seq != tc.wantSeq || f.At.Pos != tc.wantPos || f.At.Col != tc.wantFeat ||
				len(f.At.Element) != 1 || f.At.Element[0] != tc.wantFeat {
				t.Fatalf("first divergence %s seq %d pos %d col %d %v", f.Op, f.At.Seq, f.At.Pos, f.At.Col, f.At.Element)
			}
			if tc.wantULP != 0 && f.ULP != tc.wantULP {
				t.Fatalf("ulp %d, want %d", f.ULP, tc.wantULP)
			}
			if f.A.Hex == f.B.Hex {
				t.Fatalf("values equal: %+v %+v", f.A, f.B)
			}
			var mism int64
			for _, o := range rep.Ops {
				mism += o.Mismatched
			}
			if mism != int64(len(tc.flips)) {
				t.Fatalf("%d mismatches, want %d", mism, len(tc.flips))
			}
		})
	}
}

// TestDiffFirstDivergenceCausal: the first divergence follows causality, not op indexes alone. A token at
// pos p+1 is what "sample" (and the logits) chose at pos p, so a differing token is reported after the logits
// or the activation at an earlier position that changed it, though "tokens" has op index 0.
func TestDiffFirstDivergenceCausal(t *testing.T) {
	const T, H, V = 8, 6, 10
	type flip struct {
		op   string
		pos  int64
		elem int64
	}
	build := func(flips []flip) []capture.Tensor {
		var ts []capture.Tensor
		i32 := func(op string, index int32, salt uint32) capture.Tensor {
			d := make([]byte, 4*T)
			for p := range T {
				binary.LittleEndian.PutUint32(d[4*p:], uint32(p)*31+salt)
			}
			return capture.Tensor{Pos: 0, NTok: T, Op: op, Index: index, Role: "out", DType: capture.I32,
				Shape: []int64{T}, Shard: capture.NoShard, Data: d}
		}
		ts = append(ts, i32("tokens", 0, 1), tensor("embed", 1, "out", 0, 0, T, H, activation(0, 1, 0, T, H)),
			tensor("layers.0.attn.q_proj", 2, "out", 0, 0, T, H, activation(0, 2, 0, T, H)),
			f32Tensor("logits", 3, 0, 0, T, V, 3, true), i32("sample", 4, 2))
		for _, f := range flips {
			for _, x := range ts {
				if x.Op != f.op {
					continue
				}
				switch x.DType {
				case capture.BF16:
					flipBit(x.Data, f.pos*H+f.elem, 2)
				case capture.F32: // bit 16: the value stays a bf16 value, one bf16 ULP away
					x.Data[(f.pos*V+f.elem)*4+2] ^= 1
				case capture.I32:
					x.Data[f.pos*4] ^= 4
				}
			}
		}
		return ts
	}
	for _, tc := range []struct {
		name     string
		flips    []flip
		wantOp   string
		wantPos  int64
		tokCause Cause // the differing token's: propagated when sample or logits differ at the pos before
	}{
		{"logits before the token they chose", []flip{{"tokens", 6, 0}, {"embed", 6, 2}, {"sample", 5, 0}, {"logits", 5, 4}}, "logits", 5, CausePropagated},
		{"sample before the token it chose", []flip{{"tokens", 4, 0}, {"embed", 4, 1}, {"sample", 3, 0}}, "sample", 3, CausePropagated},
		{"an earlier activation before a later token", []flip{{"tokens", 6, 0}, {"layers.0.attn.q_proj", 2, 3}}, "layers.0.attn.q_proj", 2, CauseLocal},
		{"a token before what it feeds", []flip{{"tokens", 3, 0}, {"embed", 3, 0}, {"logits", 3, 1}}, "tokens", 3, CauseLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a := writeCapture(t, dir+"/a.arrow", "trainer", 1, build(nil))
			b := writeCapture(t, dir+"/b.arrow", "sampler", 1, build(tc.flips))
			rep, err := Diff(context.Background(), a, b)
			if err != nil {
				t.Fatal(err)
			}
			if f := rep.First; f == nil || f.Op != tc.wantOp || f.At.Pos != tc.wantPos {
				t.Fatalf("first divergence %+v, want %s at pos %d", f, tc.wantOp, tc.wantPos)
			}
			if got := len(rep.Divergent()); got != len(tc.flips) {
				t.Errorf("%d divergent ops, want %d", got, len(tc.flips))
			}
			if o := rep.Ops[rep.FindOp("tokens", "out")]; o.Cause != tc.tokCause || !strings.Contains(o.CauseDetail, "'s sample and logits") {
				t.Errorf("tokens: %s (%s), want %s from the pos before", o.Cause, o.CauseDetail, tc.tokCause)
			}
			f := rep.First
			switch f.Op {
			case "logits":
				if f.ULPDType != "bf16" || f.ULP != 1 {
					t.Errorf("logits: %d ULP in %q, want 1 in bf16", f.ULP, f.ULPDType)
				}
				// the TUI's pair counts the same ULPs: one bf16 step, not 65536 f32 ones
				p, err := NewSession(a, b, rep).Pair(f.Op, f.Role, f.At.Step, f.At.Seq)
				if err != nil || p.ULPDType != capture.BF16 || p.MaxULP != 1 || p.Hist[1] == 0 {
					t.Errorf("logits pair: %v, ULPs in %s, max %d", err, p.ULPDType, p.MaxULP)
				}
			case "tokens", "sample":
				if f.ULPDType != "" || f.ULP != 0 || !strings.Contains(rep.Verdict(), "1 value differs") {
					t.Errorf("integer op: %+v; verdict %q", f, rep.Verdict())
				}
			}
		})
	}
}

func TestDiffTensorParallelShards(t *testing.T) {
	const T, H, tp = 6, 32, 2
	full := activation(0, 9, 0, T, H)
	var sharded []capture.Tensor
	for r := int64(0); r < tp; r++ {
		part := make([]byte, 0, T*H)
		for row := int64(0); row < T; row++ {
			part = append(part, full[(row*H+r*H/tp)*2:(row*H+(r+1)*H/tp)*2]...)
		}
		x := tensor("layers.0.attn.q_proj", 2, "out", 0, 0, T, H/tp, part)
		x.Rank = int32(r)
		x.Shard = capture.Shard{Dim: 1, Start: r * H / tp, FullShape: []int64{T, H}}
		sharded = append(sharded, x)
		// a replicated tensor on every rank
		y := tensor("layers.0.attn_residual", 3, "out", 0, 0, T, H, activation(0, 3, 0, T, H))
		y.Rank = int32(r)
		sharded = append(sharded, y)
	}
	whole := []capture.Tensor{tensor("layers.0.attn.q_proj", 2, "out", 0, 0, T, H, append([]byte(nil), full...)),
		tensor("layers.0.attn_residual", 3, "out", 0, 0, T, H, activation(0, 3, 0, T, H))}
	// flip one bit in rank 1's shard: row 4, local column 3 → full column 16+3
	flipBit(sharded[2].Data, 4*(H/tp)+3, 2)
	dir := t.TempDir()
	a := writeCapture(t, dir+"/a", "trainer", tp, sharded)
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, whole)
	rep, err := Diff(context.Background(), a, b)
	if err != nil {
		t.Fatal(err)
	}
	if rep.First == nil || rep.First.Op != "layers.0.attn.q_proj" || rep.First.At.Pos != 4 || rep.First.At.Col != H/tp+3 {
		t.Fatalf("first divergence %+v", rep.First)
	}
	if rep.First.ULP != 4 {
		t.Fatalf("ulp %d, want 4", rep.First.ULP)
	}
	for _, o := range rep.Ops {
		if o.Elements != T*H {
			t.Errorf("%s: %d elements, want %d", o.Op, o.Elements, T*H)
		}
	}
	if rep.Ops[1].Status != StatusIdentical || rep.Ops[0].Mismatched != 1 {
		t.Fatalf("statuses %s %s", rep.Ops[0].Status, rep.Ops[1].Status)
	}
}

func TestDiffMissingAndShapeMismatch(t *testing.T) {
	const T, H = 10, 16
	at := prefill(testOps, 2, T, H)
	bt := decode(testOps[:3], 2, T, H, 4) // no attn_residual in B
	// drop positions 6 and 7 of seq 1's embed from B
	var keep []capture.Tensor
	for _, x := range bt {
		if x.Op == "embed" && x.Seq == 1 && (x.Pos == 6 || x.Pos == 7) {
			continue
		}
		keep = append(keep, x)
	}
	// q_proj in B has another width in seq 0 only
	for i, x := range keep {
		if x.Op == "layers.0.attn.q_proj" && x.Seq == 0 && x.Pos == 0 {
			keep[i] = tensor(x.Op, x.Index, "out", 0, 0, x.NTok, H/2, make([]byte, x.NTok*H/2*2))
		}
	}
	// an op only in B
	keep = append(keep, tensor("layers.0.mlp_norm", 4, "out", 0, 0, 2, H, make([]byte, 2*H*2)))
	dir := t.TempDir()
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, at)
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, keep)
	rep, err := Diff(context.Background(), a, b)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Identical {
		t.Fatal("identical despite missing tensors")
	}
	want := map[string]Status{"embed": StatusIncomplete, "layers.0.attn_norm": StatusIdentical,
		"layers.0.attn.q_proj": StatusShapeMismatch, "layers.0.attn_residual": StatusMissingB,
		"layers.0.mlp_norm": StatusMissingA}
	for _, o := range rep.Ops {
		if o.Status != want[o.Op] {
			t.Errorf("%s: %s, want %s (%s)", o.Op, o.Status, want[o.Op], o.Detail)
		}
	}
	if e := rep.Ops[0]; e.MissingRowsB != 2 || e.Elements != (2*T-2)*H {
		t.Errorf("embed: missing rows in B %d, elements %d", e.MissingRowsB, e.Elements)
	}
	var gotEmbedGap bool
	for _, m := range rep.Missing {
		if m.Op == "embed" && m.MissingIn == "B" && m.Seq == 1 && m.Pos == 6 && m.NTok == 2 {
			gotEmbedGap = true
		}
	}
	if !gotEmbedGap {
		t.Errorf("missing list lacks embed seq 1 pos 6..8: %+v", rep.Missing)
	}
	if rep.First != nil {
		t.Errorf("first divergence %+v with no mismatched element", rep.First)
	}
}

func TestDiffCause(t *testing.T) {
	const T, H = 4, 8
	mk := func(flipIn, flipOut bool) []capture.Tensor {
		norm := activation(0, 1, 0, T, H)
		out := activation(0, 2, 0, T, H)
		in := append([]byte(nil), norm...)
		if flipIn {
			flipBit(in, 2*H+1, 0)
			flipBit(norm, 2*H+1, 0)
		}
		if flipOut {
			flipBit(out, 2*H+5, 0)
		}
		return []capture.Tensor{
			tensor("layers.0.attn_norm", 1, "out", 0, 0, T, H, norm),
			tensor("layers.0.attn.q_proj", 2, "in", 0, 0, T, H, in),
			tensor("layers.0.attn.q_proj", 2, "out", 0, 0, T, H, out),
		}
	}
	producers := func(op string) []string {
		if op == "layers.0.attn.q_proj" {
			return []string{"layers.0.attn_norm"}
		}
		return nil
	}
	for _, tc := range []struct {
		name      string
		flipIn    bool
		dropInput bool
		prod      bool
		want      Cause
	}{
		{"local by inputs", false, false, false, CauseLocal},
		{"propagated by inputs", true, false, false, CausePropagated},
		{"local by producers", false, true, true, CauseLocal},
		{"propagated by producers", true, true, true, CausePropagated},
		{"unknown", false, true, false, CauseUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, bt := mk(false, false), mk(tc.flipIn, true)
			if tc.dropInput {
				at, bt = []capture.Tensor{at[0], at[2]}, []capture.Tensor{bt[0], bt[2]}
			}
			dir := t.TempDir()
			a := writeCapture(t, dir+"/a.arrow", "trainer", 1, at)
			b := writeCapture(t, dir+"/b.arrow", "sampler", 1, bt)
			var opts []Option
			if tc.prod {
				opts = append(opts, WithProducers(producers))
			}
			rep, err := Diff(context.Background(), a, b, opts...)
			if err != nil {
				t.Fatal(err)
			}
			i := rep.FindOp("layers.0.attn.q_proj", "out")
			if got := rep.Ops[i].Cause; got != tc.want {
				t.Fatalf("cause %q (%s), want %q", got, rep.Ops[i].CauseDetail, tc.want)
			}
		})
	}
}

// TestDiffFindsFlippedBit plants one flipped bit at a random place in a 64 MiB capture (8 MiB with -short).
func TestDiffFindsFlippedBit(t *testing.T) {
	size := int64(64 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	const H = 4096
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), 42))
	rowsPerTensor := int64(64)
	n := size / (rowsPerTensor * H * 2)
	var at, bt []capture.Tensor
	for i := int64(0); i < n; i++ {
		seq, pos := i%8, (i/8)*rowsPerTensor
		d := make([]byte, rowsPerTensor*H*2)
		for j := range d {
			d[j] = byte(r.Uint32())
		}
		at = append(at, tensor("layers.0.mlp.act", 5, "out", seq, pos, rowsPerTensor, H, d))
		bt = append(bt, tensor("layers.0.mlp.act", 5, "out", seq, pos, rowsPerTensor, H, append([]byte(nil), d...)))
	}
	ti := r.Int64N(n)
	elem := r.Int64N(rowsPerTensor * H)
	bit := uint(r.IntN(16))
	flipBit(bt[ti].Data, elem, bit)
	dir := t.TempDir()
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, at)
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, bt)
	var last, total int64
	rep, err := Diff(context.Background(), a, b, WithProgress(func(d, tot int64) {
		if d < last {
			t.Errorf("progress went back: %d after %d", d, last)
		}
		last, total = d, tot
	}))
	if err != nil {
		t.Fatal(err)
	}
	f := rep.First
	wantPos := bt[ti].Pos + elem/H
	if f == nil || f.At.Seq != bt[ti].Seq || f.At.Pos != wantPos || f.At.Col != elem%H || rep.Mismatched != 1 {
		t.Fatalf("planted tensor %d seq %d pos %d col %d bit %d; got %+v (%d mismatches)", ti, bt[ti].Seq, wantPos, elem%H, bit, f, rep.Mismatched)
	}
	if last != total || total != 2*n*rowsPerTensor*H*2 {
		t.Fatalf("progress ended at %d of %d", last, total)
	}
}

func TestDiffCancel(t *testing.T) {
	dir := t.TempDir()
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, prefill(testOps, 4, 64, 1024))
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, prefill(testOps, 4, 64, 1024))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Diff(ctx, a, b); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before start: %v", err)
	}
	// cancelled from the progress callback in the middle of the run
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	_, err := Diff(ctx, a, b, WithProgress(func(done, total int64) {
		calls++
		if done > total/3 {
			cancel()
		}
	}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled mid-run: %v after %d progress calls", err, calls)
	}
}

// writeSafetensors writes tensors (name → bf16 [rows, cols] data) as a .safetensors file.
func writeSafetensors(t *testing.T, path string, names []string, shapes [][2]int64, data [][]byte) {
	t.Helper()
	header := "{"
	off := 0
	var body []byte
	for i, n := range names {
		if i > 0 {
			header += ","
		}
		header += fmt.Sprintf(`%q:{"dtype":"BF16","shape":[%d,%d],"data_offsets":[%d,%d]}`, n, shapes[i][0], shapes[i][1], off, off+len(data[i]))
		off += len(data[i])
		body = append(body, data[i]...)
	}
	header += "}"
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	out = append(out, body...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Activations dumped as safetensors by other tools diff like captures: one tensor per name, rows = dim 0.
func TestDiffSafetensors(t *testing.T) {
	dir := t.TempDir()
	h := activation(0, 1, 0, 6, 32)
	q := activation(0, 2, 0, 6, 48)
	writeSafetensors(t, dir+"/a.safetensors", []string{"hidden", "q"}, [][2]int64{{6, 32}, {6, 48}}, [][]byte{h, q})
	q2 := append([]byte(nil), q...)
	flipBit(q2, 4*48+17, 1)
	writeSafetensors(t, dir+"/b.safetensors", []string{"hidden", "q"}, [][2]int64{{6, 32}, {6, 48}}, [][]byte{h, q2})
	a, b := openTestCapture(t, dir+"/a.safetensors"), openTestCapture(t, dir+"/b.safetensors")
	rep, err := Diff(context.Background(), a, b)
	if err != nil {
		t.Fatal(err)
	}
	f := rep.First
	if f == nil || f.Op != "q" || f.At.Pos != 4 || f.At.Col != 17 || f.ULP != 2 || len(rep.Ops) != 2 || rep.Ops[0].Status != StatusIdentical {
		t.Fatalf("first %+v, ops %d", f, len(rep.Ops))
	}
}

// TestDiffWarnings: a safetensors import without an execution order, and op names one side carries with a
// prefix the other lacks, are said in every report format (and nothing is said for captures without them).
func TestDiffWarnings(t *testing.T) {
	dir := t.TempDir()
	h := activation(0, 1, 0, 6, 32)
	writeSafetensors(t, dir+"/a.safetensors", []string{"layers.0.attn_norm", "hidden"}, [][2]int64{{6, 32}, {6, 32}}, [][]byte{h, h})
	writeSafetensors(t, dir+"/b.safetensors", []string{"model.layers.0.attn_norm", "hidden"}, [][2]int64{{6, 32}, {6, 32}}, [][]byte{h, h})
	a, err := capture.Open(dir + "/a.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := capture.Open(dir + "/b.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rep, err := Diff(context.Background(), a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Warnings) < 2 || !strings.Contains(strings.Join(rep.Warnings, "\n"), "model.") {
		t.Fatalf("warnings %q", rep.Warnings)
	}
	for _, f := range []string{"text", "json", "md", "html"} {
		var out bytes.Buffer
		if err := WriteReport(&out, rep, f); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "model.") {
			t.Errorf("%s report lacks the prefix hint:\n%s", f, out.String())
		}
	}
	same, err := Diff(context.Background(), a, a)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range same.Warnings {
		if strings.Contains(w, "model.") {
			t.Errorf("a capture against itself: %q", w)
		}
	}
}

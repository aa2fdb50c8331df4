package session

import (
	"context"
	"fmt"
	"slices"

	"bitalign/capture"
)

// FingerprintOptions configures WriteFingerprints.
type FingerprintOptions struct {
	// FullOps are glob patterns (path.Match, as for WithOps) of the ops also written in full beside their
	// fingerprints; a pattern that is malformed or matches no op is an error.
	FullOps   []string
	Overwrite bool // replace an existing file at the destination
}

// WriteFingerprints writes c as a fingerprint capture at path (one Arrow file, written atomically): every
// (op, role) but capture.FullAlways's ops (written in full) as fingerprint tensors of its full rows (shards reassembled, so a TP capture's fingerprints are
// those of the unsharded tensors), and the ops matching opts.FullOps in full too, unsharded. Fingerprint
// tensors c already holds for an (op, role) it lacks in full are copied. It returns the number of tensors written.
func WriteFingerprints(ctx context.Context, c *capture.Capture, path string, opts FingerprintOptions) (int, error) {
	ix := indexSide(c)
	keys := make([]opKey, 0, len(ix.index))
	var names []string
	for k := range ix.index {
		keys = append(keys, k)
		names = append(names, k.op)
	}
	slices.SortFunc(keys, func(x, y opKey) int { return opOrder(ix.index[x], ix.index[y], x, y) })
	slices.Sort(names)
	full := map[string]bool{}
	if len(opts.FullOps) > 0 {
		var err error
		if full, err = matchOps(opts.FullOps, slices.Compact(names), c.Path()); err != nil {
			return 0, err
		}
	}
	meta := c.Meta()
	meta.TP, meta.PP, meta.DP, meta.Rank = 1, 1, 1, 0 // one file holding unsharded tensors
	var wopts []capture.WriterOption
	if opts.Overwrite {
		wopts = append(wopts, capture.WithOverwrite())
	}
	w, err := capture.Create(path, meta, wopts...)
	if err != nil {
		return 0, err
	}
	n := 0
	fail := func(err error) (int, error) {
		w.Abort()
		return 0, err
	}
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		index := ix.index[k]
		always := slices.Contains(capture.FullAlways, k.op)
		if len(ix.byOp[k]) == 0 { // fingerprints only: copy them
			for _, i := range ix.fps[k] {
				t, err := c.Tensor(i)
				if err != nil {
					return fail(err)
				}
				if err := w.Write(t); err != nil {
					return fail(err)
				}
				n++
			}
			continue
		}
		units, probs, err := buildUnits(c, ix.byOp[k])
		if err != nil {
			return fail(err)
		}
		if len(probs) > 0 {
			p := probs[0]
			return fail(fmt.Errorf("session: %s: %s [%s] step %d seq %d pos %d: %s", c.Path(), k.op, k.role, p.step, p.seq, p.pos, p.reason))
		}
		for i := range units {
			u := &units[i]
			ntok := u.rows
			shape := append([]int64{u.rows}, u.feat...)
			if u.whole { // not per token: the unit is the whole tensor
				ntok, shape = 0, u.feat
			}
			t := capture.Tensor{Step: u.step, Seq: u.seq, Pos: u.pos, NTok: ntok, Op: k.op, Index: index, Role: k.role,
				DType: u.dt, Shape: shape, Shard: capture.NoShard, Data: u.data}
			if full[k.op] || always {
				if err := w.Write(t); err != nil {
					return fail(err)
				}
				n++
			}
			if always {
				continue
			}
			ft, err := capture.FingerprintTensor(t)
			if err != nil {
				return fail(err)
			}
			if err := w.Write(ft); err != nil {
				return fail(err)
			}
			n++
		}
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return n, nil
}

// Fingerprint opens the capture at src (a file or a complete per-rank directory) and writes it as a
// fingerprint capture at dst (WriteFingerprints). Every error names the file.
func Fingerprint(ctx context.Context, src, dst string, opts FingerprintOptions) (int, error) {
	c, err := openCapture(src)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return WriteFingerprints(ctx, c, dst, opts)
}

package session

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"bitalign/capture"
)

// Fingerprint comparison (docs/capture-format.md, "Fingerprint tensors"). An (op, role) that a side holds only
// as fingerprints is compared row by row through fingerprints: the side that holds the full tensors gets its
// fingerprints computed here (capture.FingerprintRows over the reassembled rows), and the two streams of one
// i64 per token row are aligned and compared like any integer op. Such an op is located only (OpStat.Located):
// which positions differ is exact, the values and ULPs are not known.

// fingerprintMode reports whether (op, role) k is compared through fingerprints: a side has fingerprints of it
// and no full tensor.
func fingerprintMode(ia, ib *sideIndex, k opKey) bool {
	fpOnly := func(s *sideIndex) bool { return len(s.byOp[k]) == 0 && len(s.fps[k]) > 0 }
	return fpOnly(ia) || fpOnly(ib)
}

// fingerprintUnits returns one side's fingerprint units of k (one i64 per row, rowLen 1), computed from the
// full tensors when the side has them, else read from its fingerprint tensors; and the full side's first
// unit's dtype and feature shape (ok false when the side holds fingerprints only).
func fingerprintUnits(s *sideIndex, k opKey) (us []unit, probs []problem, dt capture.DType, feat []int64, ok bool, err error) {
	if len(s.byOp[k]) > 0 {
		full, probs, err := buildUnits(s.c, s.byOp[k])
		if err != nil {
			return nil, nil, 0, nil, false, err
		}
		for i := range full {
			u := &full[i]
			fps, err := capture.FingerprintRows(u.data, u.rows)
			if err != nil { // buildUnits made rows divide the data: not reached
				return nil, nil, 0, nil, false, fmt.Errorf("session: %s: %v", k.op, err)
			}
			data := make([]byte, 8*len(fps))
			for r, v := range fps {
				binary.LittleEndian.PutUint64(data[8*r:], v)
			}
			us = append(us, unit{step: u.step, seq: u.seq, pos: u.pos, rows: u.rows, rowLen: 1, dt: capture.I64, data: data})
		}
		if len(full) > 0 {
			dt, feat, ok = full[0].dt, full[0].feat, true
		}
		return us, probs, dt, feat, ok, nil
	}
	for _, i := range s.fps[k] {
		e := s.c.Entry(i)
		data, err := s.c.Data(i)
		if err != nil {
			return nil, nil, 0, nil, false, err
		}
		// the reader checked the layout: i64, shape [FingerprintRowCount(NTok)], not sharded
		us = append(us, unit{step: e.Step, seq: e.Seq, pos: e.Pos, rows: capture.FingerprintRowCount(e.NTok), rowLen: 1,
			dt: capture.I64, data: data})
	}
	slices.SortStableFunc(us, func(x, y unit) int {
		return cmp.Or(cmp.Compare(x.step, y.step), cmp.Compare(x.seq, y.seq), cmp.Compare(x.pos, y.pos))
	})
	return us, nil, 0, nil, false, nil
}

// diffFingerprints compares (op, role) k through fingerprints, filling st like diffOp.
func diffFingerprints(ctx context.Context, cfg *config, ia, ib *sideIndex, k opKey, st *OpStat, accs []*acc,
	addMissing func(MissingTensor), progress func(int64)) (*rowSets, error) {
	ua, pa, dta, feata, oka, err := fingerprintUnits(ia, k)
	if err != nil {
		return nil, err
	}
	ub, pb, dtb, featb, okb, err := fingerprintUnits(ib, k)
	if err != nil {
		return nil, err
	}
	st.Located = true
	unassembled(pa, pb, addMissing)
	switch {
	case oka:
		st.DType, st.Shape = dta.String(), feata
	case okb:
		st.DType, st.Shape = dtb.String(), featb
	}
	if len(ua) == 0 || len(ub) == 0 {
		oneSided(st, ua, ub, addMissing)
		return nil, nil
	}
	f, err := formatOf(capture.I64)
	if err != nil {
		return nil, err
	}
	al := align(ua, ub)
	for _, m := range al.missing {
		addMissing(m)
	}
	st.MissingRowsA, st.MissingRowsB = al.rowsA, al.rowsB
	o := newOpWork(f, al.pieces, 0, 0) // no map: a fingerprint says which row differs, not which feature
	for i := range o.pieces {
		st.Elements += o.pieces[i].rows
	}
	w, err := o.run(ctx, accs, progress)
	if err != nil {
		return nil, err
	}
	shape := st.Shape
	st.Shape = nil // coordinates of a row: no element within it
	fill(st, o, w, f)
	st.Shape = shape
	if st.FirstAt != nil {
		st.FirstAt.Element, st.FirstAt.Col = nil, 0
		st.firstCoord = *st.FirstAt
	}
	st.Status = compared(st)
	return o.rowSets(), nil
}

// RecordLine is the Python call that records ops in full next to every op's fingerprints
// (capture/python/bitalign_capture.record), for the ops a fingerprint diff could only locate; "" for none.
func RecordLine(ops []string) string {
	if len(ops) == 0 {
		return ""
	}
	q := make([]string, len(ops))
	for i, op := range ops {
		q[i] = strconv.Quote(op)
	}
	return `bitalign_capture.record(..., mode="fingerprint", full_ops=[` + strings.Join(q, ", ") + `])`
}

// locatedLines are the fingerprint lines of every report format: how many ops were compared through
// fingerprints, which divergent ones could only be located, and the record line for them; none when no op was.
func locatedLines(r *Report) []string {
	if r.Located == 0 {
		return nil
	}
	out := []string{plural(r.Located, "op") + " compared through fingerprints (which rows differ, not their values)"}
	if len(r.LocatedOnly) > 0 {
		out = append(out, "located only (no values, no ULPs): "+strings.Join(r.LocatedOnly, ", "),
			"to record in full next time where they start (the ops not called propagated): "+r.RecordFull())
	}
	return out
}

// locatedError is why an (op, role) compared through fingerprints has no values to show (Session.Pair).
func locatedError(ia, ib *sideIndex, k opKey) error {
	var sides []string
	for i, s := range []*sideIndex{ia, ib} {
		if len(s.byOp[k]) == 0 && len(s.fps[k]) > 0 {
			sides = append(sides, [...]string{"A", "B"}[i])
		}
	}
	return fmt.Errorf("%s [%s]: located only: %s holds fingerprints, not values (to record it in full: %s)",
		k.op, k.role, strings.Join(sides, " and "), RecordLine([]string{k.op}))
}

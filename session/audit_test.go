package session

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
)

// TestAuditDemoFaults: on the engine's demo, the audit names the op a real bug planted and nothing for faults
// that are rounding noise (a kernel that sums in another order is a correct kernel), although `diff` calls
// every one of them a divergence.
func TestAuditDemoFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo")
	}
	tests := []struct {
		fault string
		layer int
		want  string // the first suspect's op on side B (the sampler); "" = no suspect
		wantB bool
	}{
		{"fusion", 2, "", false},  // fused residual + norm: a correct kernel, within rounding
		{"split-k", 1, "", false}, // another summation order: noise
		// an approximate exp in the softmax: ~1% off in the probabilities, 3 ULPs at most in the bf16 output, what
		// a bf16 attention that rounds its probabilities gives too (transformers' eager attention: 3.3)
		{"fast-exp", 2, "", false},
		{"stale-weights", 1, "layers.1.", true}, // every op reading layer 1's weights
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			s, m := openDemo(t, tt.fault, tt.layer)
			s.Report = &Report{A: CaptureInfo{Side: "trainer"}, B: CaptureInfo{Side: "sampler"}}
			r, err := Audit(context.Background(), s, m, AuditOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if len(r.Suspects) != 0 {
					t.Fatalf("%s is rounding noise, but the audit has %d suspects; first: %s", tt.fault, len(r.Suspects), r.Suspects[0].Evidence)
				}
				if r.Exit() != 0 {
					t.Errorf("exit %d without suspects", r.Exit())
				}
				return
			}
			if len(r.Suspects) == 0 {
				t.Fatalf("no suspect for the %s fault; ops:\n%s", tt.fault, auditText(t, r))
			}
			s0 := r.Suspects[0]
			if !strings.HasPrefix(s0.Op, tt.want) || s0.Side != 1 || s0.SideName != "sampler" {
				t.Errorf("first suspect %s on side %d (%s), want %s on the sampler:\n%s", s0.Op, s0.Side, s0.SideName, tt.want, auditText(t, r))
			}
			for _, su := range r.Suspects {
				if su.Side != 1 {
					t.Errorf("a suspect on the trainer, which has no fault: %s", su.Evidence)
				}
				if su.Ratio <= r.Margin || su.LocalULP <= su.NoiseFloorULP*r.Margin {
					t.Errorf("suspect %s is within the margin: %g ULP against a floor of %g", su.Op, su.LocalULP, su.NoiseFloorULP)
				}
			}
			if r.Exit() != 1 {
				t.Errorf("exit %d with suspects", r.Exit())
			}
			// the replay verdict at the suspect says the same (local or propagated, it names the wrong side)
			v, err := Replay(context.Background(), s, m, s0.Op, s0.Step, s0.Seq)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(v.Text, "sampler computes this op wrongly") {
				t.Errorf("replay verdict at the first suspect: %q", v.Text)
			}
		})
	}
}

func auditText(t *testing.T, r *AuditReport) string {
	var b bytes.Buffer
	if err := WriteAudit(&b, r, "text"); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// synthetic builds an audit of n layers of one family plus a one-op family from the given local errors
// (ULPs at the row's scale; -1: not measured) and applies the rules.
func synthetic(a, b []float64, logitsA, logitsB float64) *AuditReport {
	r := &AuditReport{Schema: AuditSchemaVersion, Margin: DefaultAuditMargin, A: CaptureInfo{Side: "trainer"}, B: CaptureInfo{Side: "sampler"}}
	side := func(x float64) AuditSide {
		if x < 0 {
			return AuditSide{Err: "not captured", ScaleULP: -1, LocalULP: -1, EngineLocalULP: -1}
		}
		return AuditSide{DType: capture.BF16.String(), Positions: 1, Elements: 1, ScaleULP: x, LocalULP: x,
			EngineLocalULP: -1, WorstLocal: &Coord{Pos: 3, Element: []int64{5}}}
	}
	for l := range a {
		op := "layers." + string(rune('0'+l)) + ".mlp.down_proj"
		fam, layer := Family(op)
		r.Ops = append(r.Ops, AuditOp{Op: op, Index: 10 + l, Family: fam, Layer: layer, Sides: [2]AuditSide{side(a[l]), side(b[l])}})
	}
	r.Ops = append(r.Ops, AuditOp{Op: "logits", Index: 99, Family: "logits", Layer: -1,
		Sides: [2]AuditSide{side(logitsA), side(logitsB)}})
	r.floors()
	r.suspects(nil)
	return r
}

// TestAuditRules checks docs/audit.md's two rules and the floor on tables of local errors.
func TestAuditRules(t *testing.T) {
	tests := []struct {
		name    string
		a, b    []float64
		la, lb  float64
		want    []string // "op/side/rule" in rank order
		floorB1 float64  // the floor of layer 1's op on side B
	}{
		{"quiet", []float64{0.5, 1, 0.7, 0.2}, []float64{2, 3, 4, 2.5}, 0.1, 0.3, nil, 2.75},
		{"one layer out of line", []float64{0.5, 1, 0.7, 0.2}, []float64{2, 90, 4, 2.5}, 0.1, 0.3,
			[]string{"layers.1.mlp.down_proj/1/outlier"}, 3.25},
		{"the other side's noise does not hide it", []float64{0.5, 40, 0.7, 0.2}, []float64{3, 3, 3.5, 2.5}, 0.1, 0.3,
			[]string{"layers.1.mlp.down_proj/0/outlier"}, 3},
		{"every layer on one side", []float64{0.5, 1, 0.7, 0.2}, []float64{50, 60, 40, 30}, 0.1, 0.3,
			[]string{"layers.1.mlp.down_proj/1/systematic", "layers.0.mlp.down_proj/1/systematic",
				"layers.2.mlp.down_proj/1/systematic", "layers.3.mlp.down_proj/1/systematic"}, 45},
		{"a family of one", []float64{0.5, 1, 0.7, 0.2}, []float64{2, 3, 4, 2.5}, 0.1, 300,
			[]string{"logits/1/systematic"}, 2.75},
		{"both sides equally off is not one side's bug", []float64{50, 60, 40, 30}, []float64{50, 60, 40, 30}, 0.1, 0.3, nil, 45},
		{"a side not measured", []float64{-1, -1, -1, -1}, []float64{2, 90, 4, 2.5}, -1, 0.3,
			[]string{"layers.1.mlp.down_proj/1/outlier"}, 3.25},
		{"NaN against a number", []float64{0.5, 1, 0.7, 0.2}, []float64{2, AuditNonFiniteULP, 4, 2.5}, 0.1, 0.3,
			[]string{"layers.1.mlp.down_proj/1/outlier"}, 3.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := synthetic(tt.a, tt.b, tt.la, tt.lb)
			var got []string
			for _, s := range r.Suspects {
				got = append(got, s.Op+"/"+string(rune('0'+s.Side))+"/"+s.Rule)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("suspects %v, want %v", got, tt.want)
			}
			if f := r.Ops[1].Sides[1].FloorULP; f != tt.floorB1 {
				t.Errorf("floor of layer 1 on side B = %g, want %g", f, tt.floorB1)
			}
			if (len(tt.want) > 0) != (r.Exit() == 1) {
				t.Errorf("exit %d with %d suspects", r.Exit(), len(tt.want))
			}
		})
	}
}

// TestAuditJSON checks the documented fields of the JSON report (docs/audit.md) and that every format names
// the first suspect.
func TestAuditJSON(t *testing.T) {
	r := synthetic([]float64{0.5, 1, 0.7, 0.2}, []float64{2, 90, 4, 2.5}, 0.1, 0.3)
	var b bytes.Buffer
	if err := WriteAudit(&b, r, "json"); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Schema   int `json:"schema"`
		Suspects []struct {
			Op            string   `json:"op"`
			Side          string   `json:"side"`
			SideName      string   `json:"side_name"`
			Seq           *int64   `json:"seq"`
			Pos           *int64   `json:"pos"`
			LocalMaxULP   *uint64  `json:"local_max_ulp"`
			LocalScaleULP *float64 `json:"local_ulp"`
			NoiseFloorULP *float64 `json:"noise_floor_ulp"`
		} `json:"suspects"`
		Ops []struct {
			Op string         `json:"op"`
			A  map[string]any `json:"a"`
			B  map[string]any `json:"b"`
		} `json:"ops"`
	}
	if err := json.Unmarshal(b.Bytes(), &j); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if j.Schema != AuditSchemaVersion || len(j.Suspects) != 1 || len(j.Ops) != 5 {
		t.Fatalf("schema %d, %d suspects, %d ops:\n%s", j.Schema, len(j.Suspects), len(j.Ops), b.String())
	}
	s := j.Suspects[0]
	if s.Op != "layers.1.mlp.down_proj" || s.Side != "b" || s.SideName != "sampler" || s.Seq == nil || s.Pos == nil ||
		*s.Pos != 3 || s.LocalMaxULP == nil || s.LocalScaleULP == nil || *s.LocalScaleULP != 90 || s.NoiseFloorULP == nil {
		t.Errorf("suspect %+v", s)
	}
	if _, ok := j.Ops[1].B["scale_ulp"]; !ok {
		t.Errorf("op without scale_ulp: %v", j.Ops[1].B)
	}
	for _, f := range []string{"text", "md", "html"} {
		b.Reset()
		if err := WriteAudit(&b, r, f); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "layers.1.mlp.down_proj") || !strings.Contains(b.String(), "1 suspect") {
			t.Errorf("%s report lacks the suspect:\n%s", f, b.String())
		}
	}
	if err := WriteAudit(&b, r, "pdf"); err == nil {
		t.Error("an unknown format was written")
	}
	nan := synthetic([]float64{0.5, 1, 0.7, 0.2}, []float64{2, AuditNonFiniteULP, 4, 2.5}, 0.1, 0.3)
	if err := WriteAudit(&b, nan, "json"); err != nil {
		t.Errorf("a non-finite local error does not encode: %v", err)
	}
}

// BenchmarkAudit audits the engine's demo pair (4 layers, hidden 256, 8 sequences, 97 tokens of the trainer's
// batch; stale weights in layer 1): docs/benchmarks.md records it beside the goal (a 4-layer hidden-256 pair
// over 6 × 16 tokens in ≤ 5 s on 2 cores).
func BenchmarkAudit(b *testing.B) {
	dir := b.TempDir()
	if err := engine.Demo(dir, engine.DemoOptions{Fault: "stale-weights", Layer: 1}); err != nil {
		b.Fatal(err)
	}
	m, err := engine.Load(filepath.Join(dir, "checkpoint"))
	if err != nil {
		b.Fatal(err)
	}
	s := openSides(b, filepath.Join(dir, "trainer"), filepath.Join(dir, "sampler"))
	s.Report = &Report{}
	b.ResetTimer()
	for range b.N {
		r, err := Audit(context.Background(), s, m, AuditOptions{})
		if err != nil || len(r.Suspects) == 0 {
			b.Fatal(err, r.Headline())
		}
		b.ReportMetric(float64(r.Measured), "measurements")
	}
}

package session

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
)

// TestReplayFingerprintCapture: a fingerprint capture (some ops also in full) replays into fingerprints: the
// replay holds exactly the source's fingerprint-only ops as fingerprints, bit for bit those `bitalign
// fingerprint` computes from the full replay (--full), the other ops in full; the report (first divergence,
// every op's status, counts and where) is the --full replay's; --ops and fingerprints together write only the
// asked ops; and --timings names the phases.
func TestReplayFingerprintCapture(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo and three replays (several seconds)")
	}
	dir := t.TempDir()
	if err := engine.Demo(dir, engine.DemoOptions{Fault: "fusion", Layer: 1}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ckpt, src := filepath.Join(dir, "checkpoint"), filepath.Join(dir, "sampler-fp.arrow")
	if _, err := Fingerprint(ctx, filepath.Join(dir, "sampler"), src, FingerprintOptions{FullOps: []string{"layers.1.mlp_norm"}}); err != nil {
		t.Fatal(err)
	}
	ph := engine.NewPhases()
	fpRep, _, err := ReplayStep(ctx, ckpt, src, StepOptions{Device: "cpu", Save: filepath.Join(dir, "fp"), Timings: ph})
	if err != nil {
		t.Fatal(err)
	}
	fullRep, _, err := ReplayStep(ctx, ckpt, src, StepOptions{Device: "cpu", Save: filepath.Join(dir, "full"), Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if fpRep.Identical || fpRep.First == nil || fullRep.First == nil {
		t.Fatalf("the faulted sampler reproduces: %v %v", fpRep.First, fullRep.First)
	}
	if f, g := fullRep.First, fpRep.First; f.Op != g.Op || !sameCoord(&f.At, &g.At) || f.Located != g.Located || f.Cause != g.Cause {
		t.Errorf("first divergence %s at %v (located %v, %s); with --full %s at %v (located %v, %s)",
			g.Op, g.At, g.Located, g.Cause, f.Op, f.At, f.Located, f.Cause)
	}
	if len(fpRep.Ops) != len(fullRep.Ops) {
		t.Fatalf("%d ops compared, %d with --full", len(fpRep.Ops), len(fullRep.Ops))
	}
	for i := range fullRep.Ops {
		w, g := &fullRep.Ops[i], &fpRep.Ops[i]
		if g.Op != w.Op || g.Status != w.Status || g.Elements != w.Elements || g.Mismatched != w.Mismatched ||
			g.Located != w.Located || !sameCoord(g.FirstAt, w.FirstAt) {
			t.Errorf("%s: %s %d/%d (located %v, first at %v); with --full %s: %s %d/%d (located %v, first at %v)", g.Op,
				g.Status, g.Mismatched, g.Elements, g.Located, g.FirstAt, w.Op, w.Status, w.Mismatched, w.Elements, w.Located, w.FirstAt)
		}
	}

	// the replay's roles: fingerprints exactly where the source has fingerprints only (an op it also holds in
	// full is replayed in full: compared full against full)
	roles := func(path string) map[string]string {
		c, err := capture.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sets := map[string]map[string]bool{}
		for i := 0; i < c.Len(); i++ {
			e := c.Entry(i)
			if sets[e.Op] == nil {
				sets[e.Op] = map[string]bool{}
			}
			sets[e.Op][e.Role] = true
		}
		m := map[string]string{}
		for op, rs := range sets {
			m[op] = strings.Join(slices.Sorted(maps.Keys(rs)), "+")
		}
		return m
	}
	replayed := func(source string) string { return strings.TrimPrefix(source, "fp.out+") } // "fp.out+out" → "out"
	want, got := roles(src), roles(filepath.Join(dir, "fp"))
	if len(got) != len(want) {
		t.Errorf("the replay holds %d ops, the source %d", len(got), len(want))
	}
	for op, r := range want {
		if got[op] != replayed(r) {
			t.Errorf("%s: the replay holds role %q, the source %q", op, got[op], r)
		}
	}
	if want["layers.1.mlp_norm"] != "fp.out+out" || got["layers.0.mlp.up_proj"] != "fp.out" || got["tokens"] != "out" {
		t.Errorf("roles: source mlp_norm %q, replay up_proj %q, tokens %q", want["layers.1.mlp_norm"], got["layers.0.mlp.up_proj"], got["tokens"])
	}

	// its fingerprints are those of the full replay's rows
	ref := filepath.Join(dir, "full-fp.arrow")
	if _, err := Fingerprint(ctx, filepath.Join(dir, "full"), ref, FingerprintOptions{}); err != nil {
		t.Fatal(err)
	}
	fps := func(path string) map[string][]byte {
		c, err := capture.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		m := map[string][]byte{}
		for i := 0; i < c.Len(); i++ {
			e := c.Entry(i)
			if e.Role != capture.FingerprintPrefix+"out" {
				continue
			}
			d, err := c.Data(i)
			if err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprintf("%s seq %d pos %d", e.Op, e.Seq, e.Pos)
			m[k] = append(m[k], d...)
		}
		return m
	}
	a, b := fps(filepath.Join(dir, "fp", "rank0.arrow")), fps(ref)
	n := 0
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			t.Errorf("%s: the replay's fingerprints differ from those of the full replay", k)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no fingerprints compared")
	}
	sz := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if f, g := sz(filepath.Join(dir, "full", "rank0.arrow")), sz(filepath.Join(dir, "fp", "rank0.arrow")); g*3 > f {
		t.Errorf("the fingerprint replay is %d bytes, the full one %d", g, f)
	}

	// --ops with a fingerprint capture: only the asked ops, as the source holds them
	part, _, err := ReplayStep(ctx, ckpt, src, StepOptions{Device: "cpu", Save: filepath.Join(dir, "part"), Ops: []string{"layers.1.*"}})
	if err != nil {
		t.Fatal(err)
	}
	pr := roles(filepath.Join(dir, "part"))
	for op, r := range pr {
		if !strings.HasPrefix(op, "layers.1.") || r != replayed(want[op]) {
			t.Errorf("--ops layers.1.*: the replay holds %s as %q (the source: %q)", op, r, want[op])
		}
	}
	if part.First == nil || part.First.Op != fpRep.First.Op {
		t.Errorf("--ops layers.1.*: first divergence %v, the whole replay's %s", part.First, fpRep.First.Op)
	}

	var buf bytes.Buffer
	if err := ph.Write(&buf, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"load the checkpoint", "upload weights", "forward", "record: device→host", "record: capture writes", "diff the capture"} {
		if !strings.Contains(buf.String(), p) {
			t.Errorf("--timings names no phase %q:\n%s", p, buf.String())
		}
	}
}

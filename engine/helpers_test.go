package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"bitalign/capture"
	"bitalign/kernels"
)

// tinyConfig is the test model: 2 layers, hidden 64, 8 heads over 4 kv heads (TP 8 replicates kv heads).
func tinyConfig(arch string, dt capture.DType) Config {
	c := Config{Architecture: arch, Vocab: 64, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 8, KVHeads: 4,
		HeadDim: 8, RopeTheta: 10000, Eps: 1e-6, MaxPositions: 128, DType: dt}
	switch arch {
	case ArchQwen2:
		c.QKVBias = true
	case ArchQwen3:
		c.QKNorm = true
	case ArchQwen2MoE:
		// 2 layers, both sparse; 8 experts, 2 per token, a shared expert of width 64, weights not normalised
		c.QKVBias = true
		c.Experts, c.ExpertsPerTok, c.MoEIntermediate, c.SparseStep, c.SharedIntermediate = 8, 2, 32, 1, 64
	case ArchQwen3MoE:
		// 3 layers: 0 and 2 sparse, 1 dense (mlp_only_layers); 8 experts, 2 per token
		c.QKNorm, c.Layers = true, 3
		c.Experts, c.ExpertsPerTok, c.MoEIntermediate, c.NormTopK, c.SparseStep, c.MLPOnly = 8, 2, 32, true, 1, []int{1}
	}
	return c
}

// tinyPrompts are 8 prompts of different lengths with different new-token counts.
func tinyPrompts(cfg Config) ([][]int32, []int) {
	rng := splitmix64(42)
	var ps [][]int32
	var mn []int
	for i := 0; i < 8; i++ {
		p := make([]int32, 2+(i*3)%7)
		for j := range p {
			p[j] = int32(rng.next() % uint64(cfg.Vocab))
		}
		ps = append(ps, p)
		mn = append(mn, 2+(i*5)%6)
	}
	return ps, mn
}

// rollout samples the tiny prompts (continuous batching, 3 slots) and returns the sequences and prompt lengths.
func rollout(t *testing.T, m *Model, p kernels.Profile, dir string) ([][]int32, []int, *Output) {
	t.Helper()
	return rolloutOn(t, m, p, nil, dir)
}

// rolloutOn is rollout on backend be (nil: the CPU).
func rolloutOn(t *testing.T, m *Model, p kernels.Profile, be BackendFactory, dir string) ([][]int32, []int, *Output) {
	t.Helper()
	ps, mn := tinyPrompts(m.Config)
	o := SampleOptions{RunOptions: RunOptions{TP: 1, Profile: p, Seed: 9, Step: 3, CaptureDir: dir, Backend: be}, Slots: 3, MaxNew: mn}
	out, err := m.Sample(context.Background(), ps, o)
	if err != nil {
		t.Fatal(err)
	}
	seqs, plen := trainInputs(out)
	return seqs, plen, out
}

// captureBoth captures a canonical rollout of the tiny prompts (root/sampler) and a TP-2 trainer forward over
// its sequences (root/trainer), and returns the sequences.
func captureBoth(t *testing.T, m *Model, root string) [][]int32 {
	t.Helper()
	seqs, plen, _ := rollout(t, m, 0, filepath.Join(root, "sampler"))
	if _, err := m.Train(context.Background(), seqs, TrainOptions{RunOptions: RunOptions{TP: 2, Seed: 9, Step: 3,
		CaptureDir: filepath.Join(root, "trainer")}, PromptLens: plen}); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// trainInputs returns a sampler's sequences and their prompt lengths: what the trainer is given.
func trainInputs(out *Output) ([][]int32, []int) {
	var seqs [][]int32
	var plen []int
	for _, s := range out.Seqs {
		seqs = append(seqs, s.Tokens)
		plen = append(plen, s.Prompt)
	}
	return seqs, plen
}

// sameOutputs reports the first difference between two outputs' tokens, log-probabilities and samples.
func sameOutputs(a, b *Output) string {
	if len(a.Seqs) != len(b.Seqs) {
		return "different sequence counts"
	}
	for i := range a.Seqs {
		x, y := a.Seqs[i], b.Seqs[i]
		if len(x.Tokens) != len(y.Tokens) || len(x.Logprobs) != len(y.Logprobs) || len(x.Samples) != len(y.Samples) {
			return "different lengths in sequence " + itoa(i)
		}
		for j := range x.Tokens {
			if x.Tokens[j] != y.Tokens[j] {
				return "token differs in sequence " + itoa(i)
			}
		}
		for j := range x.Samples {
			if x.Samples[j] != y.Samples[j] {
				return "sample differs in sequence " + itoa(i)
			}
		}
		for j := range x.Logprobs {
			if math.Float32bits(x.Logprobs[j]) != math.Float32bits(y.Logprobs[j]) {
				return "logprob differs in sequence " + itoa(i) + " at position " + itoa(j)
			}
		}
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }

// compareCaptures opens two captures and returns their first bitwise divergence in execution order (nil:
// identical wherever both have data) and how many (op, seq, pos) coordinates only one side has: the engine
// tests' own check (package session gives the full report, and cannot be imported here).
func compareCaptures(cfg Config, pathA, pathB string) (*Divergence, int, error) {
	var as [2]assembly
	for i, p := range []string{pathA, pathB} {
		c, err := capture.Open(p)
		if err != nil {
			return nil, 0, err
		}
		as[i], err = assembleCapture(c)
		c.Close()
		if err != nil {
			return nil, 0, err
		}
	}
	d, missing := firstDivergence(cfg, as[0], as[1])
	return d, missing, nil
}

// compare returns the first divergence between two capture directories, failing on missing coordinates.
func compare(t *testing.T, cfg Config, a, b string) *Divergence {
	t.Helper()
	d, missing, err := compareCaptures(cfg, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if missing != 0 {
		t.Fatalf("%s vs %s: %d coordinates on one side only", a, b, missing)
	}
	return d
}

// sameWeights compares every weight bitwise.
func sameWeights(a, b *Model) bool {
	if !reflect.DeepEqual(a.Config, b.Config) {
		return false
	}
	sa, sb := a.weightSpecs(), b.weightSpecs()
	for i := range sa {
		x, y := sa[i].ptr.Float32(), sb[i].ptr.Float32() // the values, whatever dtype holds them
		if len(x) != len(y) {
			return false
		}
		for j := range x {
			if math.Float32bits(x[j]) != math.Float32bits(y[j]) {
				return false
			}
		}
	}
	return true
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readSafetensors reads a safetensors file: its bytes, its header's entries and the tensor data after the header.
func readSafetensors(t *testing.T, path string) (orig []byte, hdr map[string]json.RawMessage, data []byte) {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(orig[:8])
	if err := json.Unmarshal(orig[8:8+hlen], &hdr); err != nil {
		t.Fatal(err)
	}
	return orig, hdr, orig[8+hlen:]
}

// safetensorsFile is a safetensors file of the header bytes hb and data.
func safetensorsFile(hb, data []byte) []byte {
	return append(append(binary.LittleEndian.AppendUint64(nil, uint64(len(hb))), hb...), data...)
}

package capture

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// safetensorsFile assembles a safetensors file from a raw JSON header and the data section.
func safetensorsFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

type stTensor struct {
	name  string
	dtype string
	shape []int64
	data  []byte
}

// buildSafetensors lays tensors out back to back in the given order, like the reference writer.
func buildSafetensors(meta map[string]string, ts []stTensor) []byte {
	var hdr bytes.Buffer
	hdr.WriteString("{")
	if meta != nil {
		mj, _ := json.Marshal(meta)
		fmt.Fprintf(&hdr, `"__metadata__":%s`, mj)
	}
	var data []byte
	for i, t := range ts {
		if i > 0 || meta != nil {
			hdr.WriteString(",")
		}
		sj, _ := json.Marshal(t.shape)
		nj, _ := json.Marshal(t.name)
		fmt.Fprintf(&hdr, `%s:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, nj, t.dtype, sj, len(data), len(data)+len(t.data))
		data = append(data, t.data...)
	}
	hdr.WriteString("}")
	for hdr.Len()%8 != 0 {
		hdr.WriteString(" ")
	}
	return safetensorsFile(hdr.String(), data)
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func seqBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestSafetensorsImport(t *testing.T) {
	var ts []stTensor
	names := map[DType]string{BF16: "BF16", F16: "F16", F32: "F32", F64: "F64", I32: "I32", I64: "I64", U8: "U8",
		Bool: "BOOL", F8E4M3: "F8_E4M3", F8E5M2: "F8_E5M2"}
	for i, dt := range DTypes() {
		ts = append(ts, stTensor{fmt.Sprintf("t.%s@pos=%d", dt, i), names[dt], []int64{3, 2}, seqBytes(6*dt.Size(), byte(i))})
	}
	ts = append(ts,
		stTensor{"layers.0.attn.q_proj", "BF16", []int64{4, 8}, seqBytes(64, 1)},
		stTensor{"layers.0.attn.q_proj@step=1,seq=2,pos=16,ntok=4,role=in.0,index=7", "BF16", []int64{4, 8}, seqBytes(64, 2)},
		stTensor{"logits@seq=3,rank=1,shard_dim=1,shard_start=2,full_shape=2x4", "F32", []int64{2, 2}, seqBytes(16, 3)},
		stTensor{"scale", "F32", []int64{}, seqBytes(4, 4)},
		stTensor{"model.embed_tokens.weight@ntok=0,role=weight", "F16", []int64{2, 0}, nil},
	)
	meta := map[string]string{"side": "sampler", "tp": "2", "rank": "1", "seed": "18446744073709551615",
		"step": "5", "created": "2026-11-29T19:00:00Z", "model": `{"architecture":"qwen3"}`, "format": "pt", "zz": "y"}
	path := writeFile(t, "acts.safetensors", buildSafetensors(meta, ts))
	c := openCapture(t, path)
	if c.Len() != len(ts) {
		t.Fatalf("Len %d, want %d", c.Len(), len(ts))
	}
	m := c.Meta()
	if m.Side != "sampler" || m.TP != 2 || m.Rank != 1 || m.Seed != 1<<64-1 || m.Step != 5 || m.Created.Year() != 2026 ||
		string(m.Model) != `{"architecture":"qwen3"}` || string(m.Extra) != `{"format":"pt","zz":"y"}` {
		t.Fatalf("meta %+v extra %s", m, m.Extra)
	}
	// entries come in data-offset order, which is the order written here
	for i, st := range ts {
		tn, err := c.Tensor(i)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tn.Data, st.data) || fmt.Sprint(tn.Shape) != fmt.Sprint(st.shape) {
			t.Fatalf("tensor %d (%s): data or shape differ", i, st.name)
		}
	}
	e := func(i int) Entry { return c.Entry(i) }
	n := len(DTypes())
	// q_proj and logits are canonical (one layer, no q/k norms: OpNames(1, false, nil)); the t.* ops follow that
	// list in data order
	base := int32(len(OpNames(1, false, nil)))
	if e(0).Op != "t.bf16" || e(0).Pos != 0 || e(0).NTok != 3 || e(0).Role != "out" || e(0).Index != base || e(3).Pos != 3 || e(3).Index != base+3 {
		t.Fatalf("entry 0 %+v, entry 3 %+v", e(0), e(3))
	}
	q0, q1 := e(n), e(n+1)
	if q0.Op != "layers.0.attn.q_proj" || q0.Step != 0 || q0.NTok != 4 || q0.Index != 3 {
		t.Fatalf("plain name: %+v", q0)
	}
	if q1.Op != q0.Op || q1.Step != 1 || q1.Seq != 2 || q1.Pos != 16 || q1.NTok != 4 || q1.Role != "in.0" || q1.Index != 7 {
		t.Fatalf("suffixed name: %+v", q1)
	}
	lg := e(n + 2)
	if lg.Index != int32(OpIndex(OpLogits, 1, false, nil)) || lg.Rank != 1 || lg.Shard.Dim != 1 || lg.Shard.Start != 2 || fmt.Sprint(lg.Shard.FullShape) != "[2 4]" || lg.Seq != 3 {
		t.Fatalf("sharded: %+v", lg)
	}
	if s := e(n + 3); s.NTok != 0 || len(s.Shape) != 0 {
		t.Fatalf("scalar: %+v", s)
	}
	if w := e(n + 4); w.NTok != 0 || w.Role != "weight" || w.NBytes != 0 {
		t.Fatalf("weight: %+v", w)
	}

	h, err := ReadSafetensorsHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Tensors) != len(ts) || h.Metadata["format"] != "pt" || h.Tensors[0].Begin != h.DataStart {
		t.Fatalf("header: %d tensors, data start %d, first %+v", len(h.Tensors), h.DataStart, h.Tensors[0])
	}
}

func TestSafetensorsBitalignMeta(t *testing.T) {
	mj, _ := json.Marshal(testMeta("trainer", 1))
	path := writeFile(t, "a.safetensors", buildSafetensors(map[string]string{"bitalign.meta": string(mj), "k": "v"},
		[]stTensor{{"x", "U8", []int64{2}, []byte{1, 2}}}))
	c := openCapture(t, path)
	if m := c.Meta(); m.Side != "trainer" || m.TP != 2 || m.Rank != 1 || string(m.Extra) != `{"note":"x"}` {
		t.Fatalf("meta %+v", m)
	}
}

func TestSafetensorsErrors(t *testing.T) {
	ok := `"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	hdr := func(s string) []byte { return safetensorsFile(s, make([]byte, 16)) }
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"too short", []byte{1, 2, 3}, "truncated"},
		{"header length huge", binary.LittleEndian.AppendUint64(nil, 1<<62), "exceeds"},
		{"header length past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), "truncated safetensors file"},
		{"header length 1", append(binary.LittleEndian.AppendUint64(nil, 1), "{"...), "too small"},
		{"not an object", hdr(`[1, 2]`), "not a JSON object"},
		{"bad JSON", hdr(`{"a":`), "safetensors header"},
		{"trailing data", hdr(`{}{}`), "after top-level value"},
		{"duplicate key", hdr(`{` + ok + `,` + ok + `}`), `duplicate key "a"`},
		{"duplicate nested key", hdr(`{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), `duplicate key "dtype"`},
		{"duplicate metadata key", hdr(`{"__metadata__":{"x":"1","x":"2"}}`), `duplicate key "x"`},
		{"unknown dtype", hdr(`{"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}}`), `unknown dtype "I8"`},
		{"lowercase dtype", hdr(`{"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}`), `unknown dtype "f32"`},
		{"shape mismatch", hdr(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`), "needs 12 bytes, data_offsets give 8"},
		{"negative dim", hdr(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`), "negative"},
		{"fractional dim", hdr(`{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}`), "not a non-negative integer"},
		{"overflowing dim", hdr(`{"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}}`), "overflows int64"},
		{"overflowing product", hdr(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`), "overflows"},
		{"offsets out of range", hdr(`{"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}}`), "outside the 16 data bytes"},
		{"offsets reversed", hdr(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`), "outside"},
		{"three offsets", hdr(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}}`), "want 2"},
		{"overlap", hdr(`{` + ok + `,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`), "overlap"},
		{"missing field", hdr(`{"a":{"dtype":"F32","shape":[2]}}`), "needs dtype, shape and data_offsets"},
		{"unknown field", hdr(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`), "unknown field"},
		{"metadata not strings", hdr(`{"__metadata__":{"x":1}}`), "__metadata__"},
		{"bad metadata int", hdr(`{"__metadata__":{"tp":"two"}}`), "tp="},
		{"bad name coordinate", hdr(`{"a@pos=x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), "bad pos"},
		{"unknown coordinate", hdr(`{"a@foo=1":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), "unknown coordinate"},
		{"repeated coordinate", hdr(`{"a@pos=1,pos=2":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), "given twice"},
		{"empty op", hdr(`{"@pos=1":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), "empty op"},
		{"same coordinates", hdr(`{` + ok + `,"a@pos=0":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`), "duplicate tensor a"},
		{"deep nesting", hdr(`{"__metadata__":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`), "nested too deeply"},
		{"bad shard", hdr(`{"a@shard_dim=0,full_shape=1":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), "shard"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "x.safetensors", tc.file)
			_, err := Open(path)
			wantErr(t, err, path, tc.want)
		})
	}
}

func TestSafetensorsTruncatedEverywhere(t *testing.T) {
	full := buildSafetensors(map[string]string{"side": "trainer"}, []stTensor{
		{"a", "F32", []int64{2, 3}, seqBytes(24, 1)}, {"b@pos=2", "BF16", []int64{5}, seqBytes(10, 2)}})
	path := "cut.safetensors"
	for n := 0; n < len(full); n++ {
		if err := openNoPanic(t, path, full[:n:n]); err == nil {
			t.Fatalf("safetensors truncated to %d of %d bytes opened", n, len(full))
		}
	}
}

// saveFileOrder lays tensors out in save_file's manner: grouped by dtype, then sorted by name.
func saveFileOrder(ts []stTensor) []stTensor {
	out := slices.Clone(ts)
	slices.SortStableFunc(out, func(a, b stTensor) int {
		return cmp.Or(cmp.Compare(a.dtype, b.dtype), cmp.Compare(a.name, b.name))
	})
	return out
}

func TestSafetensorsCanonicalNamesGiveExecutionOrder(t *testing.T) {
	// a Qwen3-style dump of two layers, in save_file's order (dtype, then name): far from execution order
	canonicalNamesOrder(t, nil)
}

// canonicalNamesOrder imports a two-layer Qwen3-style dump (moe: its MoE layers, nil for none) without index
// coordinates, in save_file's order, and checks that every op gets its execution index.
func canonicalNamesOrder(t *testing.T, moe func(int) bool) {
	t.Helper()
	var ts []stTensor
	ops := []string{OpTokens, OpEmbed, OpLogits, OpFinalNorm}
	for l := 0; l < 2; l++ {
		per := LayerOps(true)
		if moe != nil && moe(l) {
			per = MoELayerOps(true)
		}
		for _, s := range per {
			if s != LayerQRope && s != LayerKRope { // HF captures have no rope ops: gaps stay
				ops = append(ops, LayerOp(l, s))
			}
		}
	}
	for i, op := range ops {
		dt := "BF16"
		switch {
		case op == OpTokens, op == LayerOp(1, LayerExperts):
			dt = "I32"
		case op == OpLogits, op == LayerOp(1, LayerRouter), op == LayerOp(1, LayerExpertWeights):
			dt = "F32"
		}
		ts = append(ts, stTensor{op, dt, []int64{2}, seqBytes(2*map[string]int{"I32": 4, "F32": 4, "BF16": 2}[dt], byte(i))})
	}
	ts = saveFileOrder(ts)
	if ts[0].name == OpTokens {
		t.Fatal("test setup: save_file order should not start with tokens")
	}
	path := writeFile(t, "hf.safetensors", buildSafetensors(map[string]string{"side": "trainer"}, ts))
	c := openCapture(t, path)
	want := OpNames(2, true, moe)
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		if int(e.Index) != slices.Index(want, e.Op) {
			t.Errorf("%s: index %d, engine order says %d", e.Op, e.Index, slices.Index(want, e.Op))
		}
	}
	if w := c.ImportWarnings(); w != nil {
		t.Fatalf("warnings %q for canonical names", w)
	}
}

func TestSafetensorsCanonicalNamesGiveExecutionOrderMoE(t *testing.T) {
	// a Qwen3-MoE-style dump (layer 0 dense, layer 1 sparse: router, experts, expert_weights, combine), in
	// save_file's order: the MoE names take the dense MLP's indexes in their layer
	canonicalNamesOrder(t, func(l int) bool { return l == 1 })
}

func TestSafetensorsIndexMetadata(t *testing.T) {
	ts := []stTensor{
		{"b.weight", "F32", []int64{1}, seqBytes(4, 1)},
		{"a.weight@pos=3", "F32", []int64{1}, seqBytes(4, 2)},
		{"c.weight@index=9", "F32", []int64{1}, seqBytes(4, 3)},
		{"a.weight", "F32", []int64{1}, seqBytes(4, 4)},
	}
	md := map[string]string{"side": "sampler", KeyImportIndex: `["a.weight","x","b.weight"]`}
	path := writeFile(t, "ix.safetensors", buildSafetensors(md, ts))
	c := openCapture(t, path)
	got := map[string]int32{}
	for i := 0; i < c.Len(); i++ {
		got[c.Entry(i).Op] = c.Entry(i).Index
	}
	if got["a.weight"] != 0 || got["b.weight"] != 2 || got["c.weight"] != 9 {
		t.Fatalf("indexes %v", got)
	}
	if len(c.Meta().Extra) != 0 || c.ImportWarnings() != nil {
		t.Fatalf("extra %s, warnings %q: %s is the order, not metadata", c.Meta().Extra, c.ImportWarnings(), KeyImportIndex)
	}

	for _, tc := range []struct{ index, want string }{
		{`{"a.weight":0}`, "want a JSON array of op names"},
		{`["a.weight","a.weight","b.weight"]`, `op "a.weight" listed twice`},
		{`["a.weight"]`, `does not list op "b.weight"`},
	} {
		p := writeFile(t, "bad.safetensors", buildSafetensors(map[string]string{KeyImportIndex: tc.index}, ts))
		_, err := Open(p)
		wantErr(t, err, p, tc.want)
	}
}

func TestSafetensorsDataOrderIsWarned(t *testing.T) {
	ts := []stTensor{
		{"model.layers.0.mlp", "F32", []int64{1}, seqBytes(4, 1)},
		{"embed", "F32", []int64{1}, seqBytes(4, 2)},
		{"model.layers.0.attn", "F32", []int64{1}, seqBytes(4, 3)},
	}
	path := writeFile(t, "mods.safetensors", buildSafetensors(nil, ts))
	c := openCapture(t, path)
	base := int32(len(OpNames(0, false, nil)))
	if e := c.Entry(1); e.Op != OpEmbed || e.Index != 1 {
		t.Fatalf("canonical embed: %+v", e)
	}
	if c.Entry(0).Index != base || c.Entry(2).Index != base+1 {
		t.Fatalf("non-canonical ops: indexes %d, %d; want %d, %d (data order after the canonical list)",
			c.Entry(0).Index, c.Entry(2).Index, base, base+1)
	}
	w := c.ImportWarnings()
	if len(w) != 1 || !strings.HasPrefix(w[0], "capture: "+path+": 2 op names are not canonical") ||
		!strings.Contains(w[0], `"model.layers.0.mlp", "model.layers.0.attn"`) ||
		!strings.Contains(w[0], "safetensors.torch.save_file") || !strings.Contains(w[0], KeyImportIndex) {
		t.Fatalf("warnings %q", w)
	}
	// no canonical name at all: plain data order from 0
	p2 := writeFile(t, "plain.safetensors", buildSafetensors(nil, []stTensor{ts[0], ts[2]}))
	c2, err := Open(p2)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.Entry(0).Index != 0 || c2.Entry(1).Index != 1 || len(c2.ImportWarnings()) != 1 {
		t.Fatalf("indexes %d %d, warnings %q", c2.Entry(0).Index, c2.Entry(1).Index, c2.ImportWarnings())
	}
}

func TestSafetensorsHugeLayerNumberIsNotCanonical(t *testing.T) {
	ts := []stTensor{{"layers.2147483647.attn_norm", "F32", []int64{1}, seqBytes(4, 1)}, {"embed", "F32", []int64{1}, seqBytes(4, 2)}}
	path := writeFile(t, "huge.safetensors", buildSafetensors(nil, ts))
	c := openCapture(t, path)
	if c.Entry(0).Index != int32(len(OpNames(0, false, nil))) || c.Entry(1).Index != 1 || len(c.ImportWarnings()) != 1 {
		t.Fatalf("entries %+v %+v", c.Entry(0), c.Entry(1))
	}
}

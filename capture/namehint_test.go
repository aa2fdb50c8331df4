package capture

import (
	"strings"
	"testing"
)

func TestPrefixHint(t *testing.T) {
	hf := []stTensor{
		{"model.embed_tokens", "F32", []int64{1}, seqBytes(4, 1)},
		{"model.layers.0.attn_norm", "F32", []int64{1}, seqBytes(4, 2)},
		{"model.layers.0.mlp_norm", "F32", []int64{1}, seqBytes(4, 3)},
		{"logits", "F32", []int64{1}, seqBytes(4, 4)},
	}
	plain := []stTensor{
		{"embed", "F32", []int64{1}, seqBytes(4, 1)},
		{"layers.0.attn_norm", "F32", []int64{1}, seqBytes(4, 2)},
		{"layers.0.mlp_norm", "F32", []int64{1}, seqBytes(4, 3)},
		{"logits", "F32", []int64{1}, seqBytes(4, 4)},
	}
	open := func(name string, ts []stTensor) *Capture {
		c, err := Open(writeFile(t, name, buildSafetensors(nil, ts)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := open("hf.safetensors", hf), open("plain.safetensors", plain)
	for _, h := range []string{PrefixHint(a, b), PrefixHint(b, a)} {
		if !strings.HasPrefix(h, a.Path()+`'s op names carry the prefix "model." that `+b.Path()+`'s lack`) ||
			!strings.Contains(h, `"model.layers.0.attn_norm" there is "layers.0.attn_norm", and 1 more`) {
			t.Fatalf("hint %q", h)
		}
	}
	if h := PrefixHint(b, open("same.safetensors", plain)); h != "" {
		t.Fatalf("hint %q for captures with the same names", h)
	}
	// names that differ otherwise get no prefix hint
	if h := PrefixHint(b, open("other.safetensors", []stTensor{{"x.y", "F32", []int64{1}, seqBytes(4, 1)}})); h != "" {
		t.Fatalf("hint %q", h)
	}
}

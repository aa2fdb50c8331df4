package session

import (
	"slices"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
)

// TestProducerGraph: the checkpoint's config wins, else the first capture metadata that records one; with
// neither there is no graph.
func TestProducerGraph(t *testing.T) {
	llama := engine.DemoConfig()
	qwen := llama
	qwen.Architecture, qwen.QKNorm = engine.ArchQwen3, true
	withModel := capture.Meta{Model: llama.ModelJSON()}
	const op = "layers.1.attn.q_rope" // qwen3's reads q_norm, llama's q_proj
	if g := ProducerGraph(nil, capture.Meta{}, withModel); g == nil || !slices.Equal(g(op), engine.Producers(llama, op)) {
		t.Error("no graph, or not the metadata's config")
	}
	m := engine.NewRandom(qwen, 1)
	if g := ProducerGraph(m, withModel); g == nil || !slices.Equal(g(op), engine.Producers(qwen, op)) {
		t.Errorf("the checkpoint's config must win: %v", g(op))
	}
	if slices.Equal(engine.Producers(qwen, op), engine.Producers(llama, op)) {
		t.Fatalf("%s has the same producers in both models: the test proves nothing", op)
	}
	if g := ProducerGraph(nil, capture.Meta{}, capture.Meta{Model: []byte(`{"architecture":"llama"}`)}); g != nil {
		t.Error("a graph without any config")
	}
}

// Package engine is bitalign's deterministic transformer: a Llama-style decoder (Llama, Qwen2 with q/k/v bias,
// Qwen3 with q/k norm, and the mixture-of-experts Qwen3-MoE and Qwen2-MoE: moe.go, docs/arithmetic.md §19)
// loaded from Hugging Face checkpoints (Load, Save, NewRandom), run in two modes that record captures:
//
//   - Train: the trainer. Each sequence t0..t(N-1) is processed at positions 0..N-2 in one prefill forward,
//     Batch sequences packed per forward (per-sequence causal), over TP ranks (goroutines joined by nvls):
//     column-parallel q/k/v and gate/up, row-parallel o_proj and down_proj (the all-reduce finishes the
//     matmul's 8-segment tree), vocab-parallel LM head with a sharded log-softmax. It records the
//     log-probability of every next token and, at positions P-1..N-2, the token the canonical sampling rule
//     would draw with key (seed, seq, pos).
//   - Sample: the sampler. Prompts are prefilled, then decoded one token per step from a KV cache with
//     continuous batching: at most Slots sequences in flight, new ones join as slots free, sequences end after
//     their own MaxNew tokens or an EOS; every forward packs prefill chunks and decode tokens together.
//
// With the canonical kernel profile (docs/arithmetic.md) every op's output, log-probability and sample is
// bitwise identical whatever the batch, the TP degree, prefill or decode, and the schedule; the standard
// profile (vendor-like kernels, ring all-reduce) is the control group that differs. Captures follow
// docs/design.md: one file per rank (DIR/rank0.arrow, ...), one tensor per (sequence, op) per forward,
// column-parallel outputs sharded along dim 1, replicated outputs on every rank.
//
// RunOp re-executes one op from its producers' captured tensors; Oracle computes the same op from the same
// tensors exactly, rounded once (the reference a side's local error is measured against: docs/arithmetic.md,
// "The oracle"); Replay re-executes a whole captured step from its tokens (with RunOptions.Routing /
// ReplayOptions.Routing, another capture's MoE routing: RoutingFromCapture); Demo writes a checkpoint, a sampler
// capture and a trainer capture, optionally with one planted fault from the Faults catalog.
//
// # Backends
//
// The forward pass (forward.go) talks only to the Backend interface: buffers (Buf) owned by the backend, one
// method per op, Upload/Download, and the collectives on backend buffers. Activations and KV caches stay in
// backend buffers between ops; only captured tensors and the logits rows needed for sampling are downloaded.
// CPU (cpu.go) calls package kernels; a GPU backend implements the same interface with the same bits and is
// passed as RunOptions.Backend (one Backend per TP rank), DemoOptions.Backend, ReplayOptions.Backend or
// WithBackend for RunOp.
package engine

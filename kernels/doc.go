// Package kernels is the CPU reference of bitalign's canonical arithmetic (docs/arithmetic.md): every op is
// written as the exact sequence of float32 operations that the CUDA kernels in kernels/cuda reproduce bit for
// bit, plus a "standard" profile that behaves like vendor libraries (not batch- or TP-invariant) as a control.
//
// Data convention: activations are float32 slices whose values are representable in the op's output DType
// (bf16 for the demo). Every op rounds its outputs with DType.Round exactly once, last. Shapes are given in a
// comment at the top of each op, row-major, as in llm.c: "x is (M, K), w is (N, K), out is (M, N)".
//
// Ops panic only on programming errors (slices shorter than the shapes say); data-dependent problems (a token
// id outside the vocabulary, a TP degree the 8-segment rule cannot split) are returned as errors.
package kernels

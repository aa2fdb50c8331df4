// Package fp is the one home of bitalign's element types: the DType enum, every dtype's bit layout, the
// ordered-integer map and ULP distance, the ±0 and NaN rules, and the conversions between float32 and the
// narrow floats (bf16, f16, f8e4m3fn, f8e5m2). The capture format, the session's diff, the UI, the engine and
// the kernels' Go reference all call it; it imports nothing of bitalign. docs/capture-format.md ("Element
// types") states the same rules for readers of the format.
//
// The rules, once:
//
//   - Equal means equal bits: +0 and −0 differ, NaNs with different bits differ.
//   - ULP distance of two floats of one dtype: map each bit pattern to the ordered integer line (a negative
//     pattern is flipped below the positive ones: ordered(x) = ^x for negative x, x | sign otherwise) and
//     subtract. −0 and +0 are adjacent (1 ULP apart), the largest finite value and infinity are 1 apart.
//   - NaN against a number is a class of its own (ClassNaNNumber) with distance ULPNaNNumber, not a count of
//     steps. Two NaNs with different bits are ClassNaNPayload, measured on the same line (capped at
//     ULPNaNNumber−1).
//   - Integers and bools: |a − b| (two's complement for i32/i64).
//   - Narrowing float32 to bf16, f16, f8e4m3fn or f8e5m2 rounds to nearest, ties to even, keeps subnormals and
//     overflows to ±Inf (f8e4m3fn, which has no infinities: to NaN). A NaN stays a NaN of the same sign:
//     quiet, with the payload's top bits kept (f8e4m3fn: its one NaN, S.1111.111).
//   - Widening to float32 is exact, NaNs included (sign and payload bits kept as they are).
//   - Op-output rounding (DType.Round, docs/arithmetic.md §1) is narrowing then widening, except that every
//     NaN becomes CanonicalNaN, so op outputs compare bitwise.
package fp

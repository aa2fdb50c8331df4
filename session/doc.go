// Package session is bitalign's debugging core: it aligns two captures tensor by tensor, compares them bit by
// bit, finds the first divergence, tells a local divergence from a propagated one, writes reports (text,
// JSON, Markdown, HTML) and answers the TUI's questions (tensor pairs, element bits, heatmaps, replay
// verdicts). It never imports the TUI.
//
// Comparison rules, per dtype:
//   - Two elements are equal when their bits are equal. Nothing else is equal: +0 and −0 differ.
//   - Float dtypes (bf16, f16, f32, f64, f8e4m3, f8e5m2): the distance in ULPs is the distance between the
//     elements' bit patterns mapped to ordered integers (negative values flipped below the positive ones), so
//     +0 and −0 are one step apart and the largest finite value is one step from infinity.
//   - NaN against NaN compares bits: equal bits are equal; different bits (payload or sign) are a mismatch of
//     class ClassNaNPayload whose distance is the ordered-integer distance of the two patterns (capped at
//     MaxUint64−1).
//   - NaN against a number (or infinity) is a class of its own, ClassNaNNumber: it counts as a mismatch and in
//     OpStat.NaNNumber but not in the ULP histogram or MaxULP; ULP returns ULPNaNNumber (MaxUint64) for it.
//   - Integer and bool dtypes compare bitwise and use |a−b| as their "ULP" distance.
//   - Absolute error |a−b| and relative error |a−b| / max(|a|, |b|) are computed in float64 over pairs where
//     both values are finite.
package session

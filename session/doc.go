// Package session is bitalign's debugging core: it aligns two captures tensor by tensor, compares them bit by
// bit, finds the first divergence, tells a local divergence from a propagated one, writes reports (text,
// JSON, Markdown, HTML) and answers the TUI's questions (tensor pairs, element bits, heatmaps, replay
// verdicts). It never imports the TUI.
//
// Comparison rules are internal/fp's, stated once in docs/capture-format.md ("Element types"): equal means
// equal bits (+0 and −0 differ); floats are compared as ordered integers, so +0 and −0 are one ULP apart; two
// NaNs with different bits are ClassNaNPayload on the same line; NaN against a number is ClassNaNNumber, which
// counts as a mismatch and in OpStat.NaNNumber but not in the ULP histogram or MaxULP (ULP returns
// ULPNaNNumber for it); integers and bools use |a−b|. Absolute error |a−b| and relative error
// |a−b| / max(|a|, |b|) are computed in float64 over pairs where both values are finite.
package session

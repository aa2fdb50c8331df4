// Package logprobs reads the per-token log-probability tables every RL framework already has (the sampler's
// rollout log-probs and the trainer's recomputation) and compares two of them with the metrics of
// docs/rl-metrics.md.
//
// A Table is one side's log-probabilities by sequence: for each sequence id, the scored tokens in position
// order, each with its float32 log-probability (and, from a capture, the full-vocabulary logits that gave
// it). Tables come from Parquet, Arrow IPC (file or stream) and JSONL files (Read, the format detected from
// the content, Sniff) with one row per token (seq, pos, token, logprob) or one per sequence (seq, tokens
// list, logprobs list, optional start), and from bitalign captures (the session package builds those).
//
// Positions: a table row at position p is the token at index p of its sequence and its log-probability given
// the tokens before it. A capture's `logprobs` op at position p concerns the token at p+1 (docs/design.md),
// so it is the table's position p+1. With Generated numbering, positions count generated tokens only (0 is
// the first token after the prompt); Compare places a capture's tokens on that numbering with each sequence's
// prompt length.
//
// Reading is bounded (MaxTokens, MaxLine) and every error names the file; nothing is ever unpickled.
package logprobs

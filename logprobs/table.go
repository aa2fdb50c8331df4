package logprobs

import (
	"cmp"
	"fmt"
	"slices"
)

// Numbering says what a table's positions count.
type Numbering uint8

const (
	// Absolute positions are token indexes in the whole sequence (prompt included), docs/design.md's.
	Absolute Numbering = iota
	// Generated positions count generated tokens only: 0 is the first token after the prompt.
	Generated
)

// String is the numbering's --positions name.
func (n Numbering) String() string {
	if n == Generated {
		return "generated"
	}
	return "absolute"
}

// ParseNumbering parses a --positions value.
func ParseNumbering(s string) (Numbering, error) {
	switch s {
	case "", "absolute":
		return Absolute, nil
	case "generated":
		return Generated, nil
	}
	return 0, fmt.Errorf("logprobs: --positions %q: want absolute or generated", s)
}

// MaxTokens bounds the tokens one table may hold (2^31 − 1: offsets and positions are int32-safe), so that a
// corrupt length can never ask for an unbounded allocation.
const MaxTokens = 1<<31 - 1

// NoToken is a token id a side does not know (a capture's last position, whose next token was not captured).
const NoToken int32 = -1

// Seq is one sequence of a Table: its tokens are Off..Off+N of the table's per-token slices, positions
// strictly increasing.
type Seq struct {
	ID     int64
	Off, N int
	// Prompt is the sequence's prompt length when the source knows it (a capture: one past the sampler's
	// first sampled position), else −1. It places Absolute positions on the Generated numbering.
	Prompt int64
}

// Table is one side's per-token log-probabilities, by sequence.
type Table struct {
	Path      string
	Format    string // "parquet", "arrow", "arrow-stream", "jsonl" or "capture"
	Side      string // what the source says ("trainer", "sampler"), "" when it says nothing
	Layout    string // "per-token" or "per-sequence" (files); "capture"
	Positions Numbering
	// Declared: the file's metadata gave Positions (bitalign.logprobs.positions), not a default.
	Declared bool
	Seqs     []Seq // sorted by ID, ids distinct

	Pos     []int32   // per token: its position
	Token   []int32   // per token: the scored token id (NoToken when unknown)
	Logprob []float32 // per token: log p(token | the tokens before it)

	// Vocab and Logits: when the source holds them (a capture's `logits` op at every position), the
	// full-vocabulary logits that scored each token, Vocab floats per token; nil otherwise.
	Vocab  int
	Logits []float32
	// Greedy is the argmax of each token's logits (nil without logits).
	Greedy []int32
	// Sample is, from a capture, the token its sampling rule drew for each token's position (its `sample`
	// op at the position before; NoToken where not captured); nil for a file.
	Sample []int32
}

// Tokens is the number of tokens the table holds.
func (t *Table) Tokens() int { return len(t.Logprob) }

// Find returns the index in Seqs of sequence id, or −1.
func (t *Table) Find(id int64) int {
	i, ok := slices.BinarySearchFunc(t.Seqs, id, func(s Seq, id int64) int { return cmp.Compare(s.ID, id) })
	if !ok {
		return -1
	}
	return i
}

// Builder collects a table's rows in any order and checks them (Finish).
type Builder struct {
	t        *Table
	seq      []int64 // per token (per-token layout only; the per-sequence layout appends whole sequences)
	sorted   bool
	perSeq   bool
	lastSeq  int64
	lastPos  int32
	started  bool
	seqStart []int // per-sequence layout: offsets of appended sequences
	seqIDs   []int64
}

// NewBuilder starts a table read from path.
func NewBuilder(path, format, layout string, positions Numbering) *Builder {
	return &Builder{t: &Table{Path: path, Format: format, Layout: layout, Positions: positions}, sorted: true,
		perSeq: layout == "per-sequence"}
}

// Grow reserves room for n more tokens.
func (b *Builder) Grow(n int) error {
	if n < 0 || len(b.t.Logprob)+n > MaxTokens {
		return fmt.Errorf("logprobs: %s: more than %d tokens", b.t.Path, MaxTokens)
	}
	b.t.Pos = slices.Grow(b.t.Pos, n)
	b.t.Token = slices.Grow(b.t.Token, n)
	b.t.Logprob = slices.Grow(b.t.Logprob, n)
	if !b.perSeq {
		b.seq = slices.Grow(b.seq, n)
	}
	return nil
}

func (b *Builder) checkPos(seq, pos int64, token int64) error {
	switch {
	case seq < 0:
		return fmt.Errorf("logprobs: %s: sequence id %d: ids must be ≥ 0", b.t.Path, seq)
	case pos < 0 || pos > MaxTokens:
		return fmt.Errorf("logprobs: %s: sequence %d: position %d out of range [0, %d]", b.t.Path, seq, pos, MaxTokens)
	case token < -1 || token > 1<<31-1:
		return fmt.Errorf("logprobs: %s: sequence %d position %d: token id %d out of range", b.t.Path, seq, pos, token)
	}
	if len(b.t.Logprob) >= MaxTokens {
		return fmt.Errorf("logprobs: %s: more than %d tokens", b.t.Path, MaxTokens)
	}
	return nil
}

// Add appends one token row (per-token layout).
func (b *Builder) Add(seq, pos, token int64, logprob float32) error {
	if err := b.checkPos(seq, pos, token); err != nil {
		return err
	}
	if b.started && (seq < b.lastSeq || seq == b.lastSeq && int32(pos) <= b.lastPos) {
		b.sorted = false
	}
	b.started, b.lastSeq, b.lastPos = true, seq, int32(pos)
	b.seq = append(b.seq, seq)
	b.t.Pos = append(b.t.Pos, int32(pos))
	b.t.Token = append(b.t.Token, int32(token))
	b.t.Logprob = append(b.t.Logprob, logprob)
	return nil
}

// AddSeq appends one whole sequence (per-sequence layout): tokens and logprobs at positions start,
// start+1, ... tokens may be nil (unknown ids).
func (b *Builder) AddSeq(seq, start int64, tokens []int32, logprobs []float32) error {
	if tokens != nil && len(tokens) != len(logprobs) {
		return fmt.Errorf("logprobs: %s: sequence %d: %d tokens but %d logprobs", b.t.Path, seq, len(tokens), len(logprobs))
	}
	n := int64(len(logprobs))
	if err := b.checkPos(seq, start, 0); err != nil {
		return err
	}
	if start+n > MaxTokens || int64(len(b.t.Logprob))+n > MaxTokens {
		return fmt.Errorf("logprobs: %s: sequence %d: positions or tokens beyond %d", b.t.Path, seq, MaxTokens)
	}
	if b.started && seq <= b.lastSeq {
		b.sorted = false
	}
	b.started, b.lastSeq = true, seq
	b.seqStart = append(b.seqStart, len(b.t.Logprob))
	b.seqIDs = append(b.seqIDs, seq)
	for i := range n {
		b.t.Pos = append(b.t.Pos, int32(start+i))
	}
	if tokens == nil {
		for range n {
			b.t.Token = append(b.t.Token, NoToken)
		}
	} else {
		for _, tok := range tokens {
			if tok < -1 {
				return fmt.Errorf("logprobs: %s: sequence %d: token id %d out of range", b.t.Path, seq, tok)
			}
		}
		b.t.Token = append(b.t.Token, tokens...)
	}
	b.t.Logprob = append(b.t.Logprob, logprobs...)
	return nil
}

// Finish sorts the rows by (sequence, position) when they were not in order, refuses a position given twice
// and returns the table.
func (b *Builder) Finish() (*Table, error) {
	t := b.t
	if b.perSeq {
		return b.finishPerSeq()
	}
	if !b.sorted {
		perm := make([]int32, len(b.seq))
		for i := range perm {
			perm[i] = int32(i)
		}
		slices.SortFunc(perm, func(x, y int32) int {
			return cmp.Or(cmp.Compare(b.seq[x], b.seq[y]), cmp.Compare(t.Pos[x], t.Pos[y]))
		})
		seq := make([]int64, len(perm))
		pos := make([]int32, len(perm))
		tok := make([]int32, len(perm))
		lp := make([]float32, len(perm))
		for i, j := range perm {
			seq[i], pos[i], tok[i], lp[i] = b.seq[j], t.Pos[j], t.Token[j], t.Logprob[j]
		}
		b.seq, t.Pos, t.Token, t.Logprob = seq, pos, tok, lp
	}
	for i := 0; i < len(b.seq); {
		j := i + 1
		for j < len(b.seq) && b.seq[j] == b.seq[i] {
			if t.Pos[j] == t.Pos[j-1] {
				return nil, fmt.Errorf("logprobs: %s: sequence %d: position %d given twice", t.Path, b.seq[i], t.Pos[j])
			}
			j++
		}
		t.Seqs = append(t.Seqs, Seq{ID: b.seq[i], Off: i, N: j - i, Prompt: -1})
		i = j
	}
	b.seq = nil
	return t, nil
}

func (b *Builder) finishPerSeq() (*Table, error) {
	t := b.t
	n := len(b.seqIDs)
	ends := func(k int) int {
		if k+1 < n {
			return b.seqStart[k+1]
		}
		return len(t.Logprob)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	if !b.sorted {
		slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(b.seqIDs[x], b.seqIDs[y]) })
	}
	for k, i := range order {
		if k > 0 && b.seqIDs[i] == b.seqIDs[order[k-1]] {
			return nil, fmt.Errorf("logprobs: %s: sequence %d given twice", t.Path, b.seqIDs[i])
		}
		t.Seqs = append(t.Seqs, Seq{ID: b.seqIDs[i], Off: b.seqStart[i], N: ends(i) - b.seqStart[i], Prompt: -1})
	}
	return t, nil
}

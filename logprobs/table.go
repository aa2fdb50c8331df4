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

// Seq is one sequence of a Table: its tokens in position order (positions strictly increasing). Its slices
// may share memory with the file's decoded columns (zero-copy): nothing may modify them.
type Seq struct {
	ID    int64
	Start int32   // the first token's position, when Pos is nil
	Pos   []int32 // per token: its position; nil when the positions are Start, Start+1, ...
	Token []int32 // per token: the scored token id (NoToken when unknown); nil: no ids at all
	// Logprob per token: log p(token | the tokens before it).
	Logprob []float32
	// Logits: when the source holds them (a capture's `logits` op at every position), the full-vocabulary
	// logits that scored each token, Table.Vocab floats per token (from a capture: a view of its mapping when
	// the tokens' rows lie in one f32 tensor in order). nil otherwise.
	Logits []float32
	// Sample is, from a capture, the token its sampling rule drew for each token's position (its `sample`
	// op at the position before; NoToken where not captured); nil for a file.
	Sample []int32
	// Prompt is the sequence's prompt length when the source knows it (a capture: one past the sampler's
	// first sampled position), else −1. It places Absolute positions on the Generated numbering.
	Prompt int64
}

// Len is the number of tokens.
func (q *Seq) Len() int { return len(q.Logprob) }

// PosAt is token i's position.
func (q *Seq) PosAt(i int) int64 {
	if q.Pos == nil {
		return int64(q.Start) + int64(i)
	}
	return int64(q.Pos[i])
}

// TokenAt is token i's id (NoToken when unknown).
func (q *Seq) TokenAt(i int) int32 {
	if q.Token == nil {
		return NoToken
	}
	return q.Token[i]
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
	Vocab    int   // the logits' row length (0: no logits)
	NTokens  int   // Σ Len over Seqs
}

// Tokens is the number of tokens the table holds.
func (t *Table) Tokens() int { return t.NTokens }

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
	t       *Table
	perSeq  bool
	sorted  bool
	started bool
	lastSeq int64
	lastPos int32
	// one row per token: the rows, split into sequences by Finish
	seq    []int64
	pos    []int32
	tok    []int32
	lp     []float32
	anyTok bool
}

// NewBuilder starts a table read from path.
func NewBuilder(path, format, layout string, positions Numbering) *Builder {
	return &Builder{t: &Table{Path: path, Format: format, Layout: layout, Positions: positions}, sorted: true,
		perSeq: layout == "per-sequence"}
}

// Grow reserves room for n more token rows (one row per token).
func (b *Builder) Grow(n int) error {
	if n < 0 || len(b.lp)+n > MaxTokens {
		return fmt.Errorf("logprobs: %s: more than %d tokens", b.t.Path, MaxTokens)
	}
	b.seq = slices.Grow(b.seq, n)
	b.pos = slices.Grow(b.pos, n)
	b.tok = slices.Grow(b.tok, n)
	b.lp = slices.Grow(b.lp, n)
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
	return nil
}

// Add appends one token row (per-token layout); token NoToken when the file has no ids.
func (b *Builder) Add(seq, pos, token int64, logprob float32) error {
	if err := b.checkPos(seq, pos, token); err != nil {
		return err
	}
	if len(b.lp) >= MaxTokens {
		return fmt.Errorf("logprobs: %s: more than %d tokens", b.t.Path, MaxTokens)
	}
	if b.started && (seq < b.lastSeq || seq == b.lastSeq && int32(pos) <= b.lastPos) {
		b.sorted = false
	}
	b.started, b.lastSeq, b.lastPos = true, seq, int32(pos)
	b.anyTok = b.anyTok || token != int64(NoToken)
	b.seq = append(b.seq, seq)
	b.pos = append(b.pos, int32(pos))
	b.tok = append(b.tok, int32(token))
	b.lp = append(b.lp, logprob)
	return nil
}

// AddSeq appends one whole sequence (per-sequence layout): tokens and logprobs at positions start,
// start+1, ... tokens may be nil (unknown ids). The table keeps both slices as they are (no copy): the
// caller must not modify them afterwards.
func (b *Builder) AddSeq(seq, start int64, tokens []int32, logprobs []float32) error {
	if tokens != nil && len(tokens) != len(logprobs) {
		return fmt.Errorf("logprobs: %s: sequence %d: %d tokens but %d logprobs", b.t.Path, seq, len(tokens), len(logprobs))
	}
	n := int64(len(logprobs))
	if err := b.checkPos(seq, start, 0); err != nil {
		return err
	}
	if start+n > MaxTokens || int64(b.t.NTokens)+n > MaxTokens {
		return fmt.Errorf("logprobs: %s: sequence %d: positions or tokens beyond %d", b.t.Path, seq, MaxTokens)
	}
	for _, tok := range tokens {
		if tok < -1 {
			return fmt.Errorf("logprobs: %s: sequence %d: token id %d out of range", b.t.Path, seq, tok)
		}
	}
	if b.started && seq <= b.lastSeq {
		b.sorted = false
	}
	b.started, b.lastSeq = true, seq
	b.t.Seqs = append(b.t.Seqs, Seq{ID: seq, Start: int32(start), Token: tokens, Logprob: logprobs, Prompt: -1})
	b.t.NTokens += int(n)
	return nil
}

// Finish sorts the rows by (sequence, position) when they were not in order, refuses a sequence or position
// given twice and returns the table.
func (b *Builder) Finish() (*Table, error) {
	t := b.t
	if b.perSeq {
		if !b.sorted {
			slices.SortStableFunc(t.Seqs, func(x, y Seq) int { return cmp.Compare(x.ID, y.ID) })
		}
		for k := 1; k < len(t.Seqs); k++ {
			if t.Seqs[k].ID == t.Seqs[k-1].ID {
				return nil, fmt.Errorf("logprobs: %s: sequence %d given twice", t.Path, t.Seqs[k].ID)
			}
		}
		return t, nil
	}
	if !b.sorted {
		perm := make([]int32, len(b.seq))
		for i := range perm {
			perm[i] = int32(i)
		}
		slices.SortFunc(perm, func(x, y int32) int {
			return cmp.Or(cmp.Compare(b.seq[x], b.seq[y]), cmp.Compare(b.pos[x], b.pos[y]))
		})
		seq := make([]int64, len(perm))
		pos := make([]int32, len(perm))
		tok := make([]int32, len(perm))
		lp := make([]float32, len(perm))
		for i, j := range perm {
			seq[i], pos[i], tok[i], lp[i] = b.seq[j], b.pos[j], b.tok[j], b.lp[j]
		}
		b.seq, b.pos, b.tok, b.lp = seq, pos, tok, lp
	}
	for i := 0; i < len(b.seq); {
		j := i + 1
		contiguous := true
		for j < len(b.seq) && b.seq[j] == b.seq[i] {
			if b.pos[j] == b.pos[j-1] {
				return nil, fmt.Errorf("logprobs: %s: sequence %d: position %d given twice", t.Path, b.seq[i], b.pos[j])
			}
			contiguous = contiguous && b.pos[j] == b.pos[j-1]+1
			j++
		}
		q := Seq{ID: b.seq[i], Start: b.pos[i], Logprob: b.lp[i:j:j], Prompt: -1}
		if !contiguous {
			q.Pos = b.pos[i:j:j]
		}
		if b.anyTok {
			q.Token = b.tok[i:j:j]
		}
		t.Seqs = append(t.Seqs, q)
		i = j
	}
	t.NTokens = len(b.lp)
	b.seq = nil
	return t, nil
}

package logprobs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// MaxLine bounds one JSONL line (a sequence's row holds its whole lists).
const MaxLine = 256 << 20

// jsonFloat is a log-probability in JSON: a number, or the strings "NaN", "Infinity", "-Infinity" (JSON has
// no literals for them).
type jsonFloat float64

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN", "nan":
			*f = jsonFloat(math.NaN())
		case "Infinity", "inf", "+inf":
			*f = jsonFloat(math.Inf(1))
		case "-Infinity", "-inf":
			*f = jsonFloat(math.Inf(-1))
		default:
			return fmt.Errorf("%q is not a number", s)
		}
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("%s is not a number", b)
	}
	*f = jsonFloat(v)
	return nil
}

func readJSONL(ctx context.Context, path string, o Options) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("logprobs: %v", err)
	}
	defer f.Close()
	c := o.columns()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), MaxLine)
	var b *Builder
	line := 0
	for sc.Scan() {
		line++
		if line%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var row map[string]json.RawMessage
		if err := json.Unmarshal(raw, &row); err != nil {
			return nil, fmt.Errorf("logprobs: %s: line %d: %v", path, line, err)
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("logprobs: %s: line %d: "+format, append([]any{path, line}, args...)...)
		}
		field := func(names string, v any) (bool, error) {
			var r json.RawMessage
			ok := false
			for _, n := range strings.Split(names, ",") {
				if r, ok = row[strings.TrimSpace(n)]; ok {
					break
				}
			}
			if !ok {
				return false, nil
			}
			name := names
			if err := json.Unmarshal(r, v); err != nil {
				return true, bad("%q: %v", name, err)
			}
			return true, nil
		}
		var seq int64
		if ok, err := field(c.Seq, &seq); err != nil {
			return nil, err
		} else if !ok {
			return nil, bad("no %q (sequence id); name the keys with --seq-col, --pos-col, --token-col, --logprob-col or --tokens-col, --logprobs-col, --start-col", c.Seq)
		}
		perSeq := false
		for _, n := range strings.Split(c.Logprobs, ",") {
			_, ok := row[strings.TrimSpace(n)]
			perSeq = perSeq || ok
		}
		if b == nil {
			b = NewBuilder(path, "jsonl", layoutName(perSeq), o.Positions)
		} else if perSeq != b.perSeq {
			return nil, bad("mixes one row per token and one row per sequence")
		}
		if perSeq {
			var lps []jsonFloat
			var toks []int32
			var start int64
			if _, err := field(c.Logprobs, &lps); err != nil {
				return nil, err
			}
			hasTok, err := field(c.Tokens, &toks)
			if err != nil {
				return nil, err
			}
			if _, err := field(c.Start, &start); err != nil {
				return nil, err
			}
			lp32 := make([]float32, len(lps))
			for i, v := range lps {
				lp32[i] = float32(v)
			}
			if !hasTok {
				toks = nil
			}
			if err := b.AddSeq(seq, start, toks, lp32); err != nil {
				return nil, err
			}
			continue
		}
		var pos, tok int64 = 0, int64(NoToken)
		var lp jsonFloat
		if ok, err := field(c.Pos, &pos); err != nil {
			return nil, err
		} else if !ok {
			return nil, bad("no %q (the token's position)", c.Pos)
		}
		if _, err := field(c.Token, &tok); err != nil {
			return nil, err
		}
		if ok, err := field(c.Logprob, &lp); err != nil {
			return nil, err
		} else if !ok {
			return nil, bad("no %q (the token's log-probability)", c.Logprob)
		}
		if err := b.Add(seq, pos, tok, float32(lp)); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("logprobs: %s: line %d: %v", path, line+1, err)
	}
	if b == nil {
		return nil, fmt.Errorf("logprobs: %s: no rows", path)
	}
	return b.Finish()
}

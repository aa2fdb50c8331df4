package capture

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// PrefixHint explains op names that do not align between two captures because one side's names carry a
// prefix the other's lack (tensors saved from a module tree: "model.layers.0.attn_norm" vs
// "layers.0.attn_norm"). It returns "" when no prefix explains a name of one side as a name of the other.
// Callers aligning two captures (the diff) show it next to the ops found on one side only.
func PrefixHint(a, b *Capture) string {
	return prefixHint(a.Path(), opSet(a), b.Path(), opSet(b))
}

// opSet lists c's op names, each once, sorted.
func opSet(c *Capture) []string {
	seen := map[string]bool{}
	var ops []string
	for i := 0; i < c.Len(); i++ {
		if op := c.Entry(i).Op; !seen[op] {
			seen[op] = true
			ops = append(ops, op)
		}
	}
	slices.Sort(ops)
	return ops
}

// prefixHint is PrefixHint on the sorted op names of two captures called aName and bName.
func prefixHint(aName string, aOps []string, bName string, bOps []string) string {
	pa, na, exA := commonPrefix(aOps, bOps)
	pb, nb, exB := commonPrefix(bOps, aOps)
	if na == 0 && nb == 0 {
		return ""
	}
	with, without, p, n, ex := aName, bName, pa, na, exA
	if nb > na || (nb == na && pb < pa) {
		with, without, p, n, ex = bName, aName, pb, nb, exB
	}
	more := ""
	if n > 1 {
		more = fmt.Sprintf(", and %d more", n-1)
	}
	return fmt.Sprintf("%s's op names carry the prefix %q that %s's lack (%q there is %q%s): save them "+
		"without it so the two sides align", with, p, without, ex, strings.TrimPrefix(ex, p), more)
}

// commonPrefix finds the prefix ending in "." that, cut from the most names of ops missing from others, turns
// them into names of others: the prefix, how many it explains and the first of them (ties: the shorter
// prefix, then the smaller).
func commonPrefix(ops, others []string) (prefix string, n int, example string) {
	in := make(map[string]bool, len(others))
	for _, o := range others {
		in[o] = true
	}
	count := map[string]int{}
	first := map[string]string{}
	for _, op := range ops {
		if in[op] {
			continue
		}
		for i := 0; i < len(op); i++ {
			if op[i] == '.' && in[op[i+1:]] {
				p := op[:i+1]
				if count[p] == 0 {
					first[p] = op
				}
				count[p]++
			}
		}
	}
	keys := slices.Sorted(maps.Keys(count)) // map order must not reach the hint
	for _, p := range keys {
		c := count[p]
		if c > n || (c == n && len(p) < len(prefix)) {
			prefix, n, example = p, c, first[p]
		}
	}
	return prefix, n, example
}

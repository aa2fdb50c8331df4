package kernels

import (
	"strings"
	"testing"
)

// TestProfileRules: ParseProfile reads every profile's name (any case) and names them all when it refuses one;
// the rules the engine asks: tc changes matmuls and attention only (Others canonical), only standard rings its
// all-reduces, and tc serves bf16 models with head dims a multiple of 16.
func TestProfileRules(t *testing.T) {
	for _, p := range Profiles {
		for _, s := range []string{p.String(), strings.ToUpper(p.String())} {
			if got, err := ParseProfile(s); err != nil || got != p {
				t.Errorf("ParseProfile(%q) = %v, %v; want %v", s, got, err, p)
			}
		}
	}
	if _, err := ParseProfile("tensor"); err == nil || !strings.Contains(err.Error(), "canonical, standard, tc") {
		t.Errorf("ParseProfile(tensor): %v, want an error listing canonical, standard, tc", err)
	}
	for _, c := range []struct {
		p      Profile
		others Profile
		ring   bool
	}{{Canonical, Canonical, false}, {Standard, Standard, true}, {TC, Canonical, false}} {
		if c.p.Others() != c.others || c.p.RingAllReduce() != c.ring {
			t.Errorf("%v: Others %v RingAllReduce %v; want %v %v", c.p, c.p.Others(), c.p.RingAllReduce(), c.others, c.ring)
		}
	}
	for _, c := range []struct {
		p    Profile
		dt   DType
		hd   int
		want string // "" : served
	}{
		{TC, BF16, 128, ""}, {TC, BF16, 64, ""}, {TC, BF16, 16, ""},
		{TC, F32, 128, "bf16 models only, this one is f32"}, {TC, F16, 64, "bf16 models only, this one is f16"},
		{TC, BF16, 8, "multiple of 16, this model's is 8"}, {TC, BF16, 72, "this model's is 72"},
		{Canonical, F32, 8, ""}, {Standard, F16, 8, ""},
	} {
		err := c.p.Serves(c.dt, c.hd)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v.Serves(%v, %d) = %v, want %q", c.p, c.dt, c.hd, err, c.want)
		}
	}
}

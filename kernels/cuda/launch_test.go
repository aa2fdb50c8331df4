package cudakernels

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"bitalign/internal/golden"
	"bitalign/kernels"
)

// h200 is the device the plan table is written for (132 SMs, 227 KB of opt-in shared memory per block).
var h200 = Limits{SMs: 132, SmemOptin: 232448}

// launchPlansFile pins the plans planMatmul … planSample make over a sweep of shapes; the Python package's
// bitalign.launch must make the same ones from the same launch.json (capture/python/tests/test_launch.py).
const launchPlansFile = "testdata/launch_plans.tsv"

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func planLine(b *bytes.Buffer, op, args string, ls ...Launch) {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.String()
	}
	fmt.Fprintf(b, "%s\t%s\t%s\n", op, args, strings.Join(s, "; "))
}

// launchPlans writes every plan of the sweep, one line each: op, its arguments, its launches.
func launchPlans(l Limits) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# launch plans for sms=%d smem_optin=%d (go test ./kernels/cuda -run LaunchPlans -update)\n", l.SMs, l.SmemOptin)
	Ms := []int{1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 64, 65, 128, 256, 512, 1024, 4096, 8192}
	Ks := []int{64, 1001, 4096, 4100}
	Ns := []int{7, 256, 4096, 151936}
	for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
		for _, M := range Ms {
			for _, K := range Ks {
				for _, N := range Ns {
					bounds, tree := kernels.MatmulBounds(p, M, K)
					matmulLine(&b, l, p, M, K, N, 1, bounds, tree)
				}
			}
		}
		// the projections of Qwen2-1.5B and Qwen2.5-7B (q/k/v stacked, o, gate, down), where the choice of G
		// was measured (scripts/plan_sweep.py)
		for _, kn := range [][2]int{{1536, 2048}, {1536, 1536}, {1536, 8960}, {8960, 1536}, {3584, 4608}, {3584, 3584},
			{3584, 18944}, {18944, 3584}} {
			for _, M := range []int{512, 1024, 4096, 8192} {
				bounds, tree := kernels.MatmulBounds(p, M, kn[0])
				matmulLine(&b, l, p, M, kn[0], kn[1], 1, bounds, tree)
			}
		}
		for _, tp := range []int{2, 4, 8} {
			for _, M := range []int{1, 16, 33, 512, 4096} {
				for _, kl := range []int{768, 1120, 1001} {
					bounds, tree, _ := kernels.PartialBounds(p, kl, tp)
					matmulLine(&b, l, p, M, kl, 4096, tp, bounds, tree)
				}
			}
		}
		for _, rows := range []int{1, 7, 512} {
			for _, C := range []int{64, 1536, 4096, 8192, 65536, 500000} {
				for _, general := range []bool{false, true} {
					planLine(&b, "rmsnorm", fmt.Sprintf("profile=%s rows=%d C=%d general=%t", p, rows, C, general), planRMSNorm(l, p, general, rows, C))
				}
			}
		}
		for _, T := range []int{1, 3, 64, 512} {
			for _, h := range [][2]int{{32, 8}, {12, 2}, {28, 4}, {64, 1}, {16, 16}} {
				for _, hd := range []int{64, 80, 128, 256} {
					for _, fast := range []bool{false, true} {
						if fast && p == kernels.Standard {
							continue
						}
						for _, general := range []bool{false, true} {
							pl := planAttention(l, p, fast, general, T, h[0], h[1], hd)
							planLine(&b, "attention", fmt.Sprintf("profile=%s fast=%t general=%t T=%d nh=%d nkv=%d hd=%d tq=%d mode=%d",
								p, fast, general, T, h[0], h[1], hd, pl.TQ, pl.Mode), pl.Launch)
						}
					}
				}
			}
		}
	}
	for _, n := range []int64{1, 255, 256, 257, 1 << 20, 1<<31 + 3} {
		for _, k := range []string{"residual", "swiglu", "round_buf", "add_bias", "embedding", "rope"} {
			planLine(&b, "elementwise", fmt.Sprintf("kernel=%s n=%d", k, n), planElementwise(k, n))
		}
		for _, aligned := range []bool{false, true} {
			planLine(&b, "swiglu", fmt.Sprintf("n=%d aligned=%t", n, aligned), planSwiGLU(n, aligned))
		}
	}
	for _, T := range []int{1, 8, 4096} {
		for _, V := range []int{1, 4096, 4097, 151936, 152064 / 8} {
			part, fin, nb := planLogSoftmaxMax(T, V)
			planLine(&b, "logsoftmax_max", fmt.Sprintf("T=%d V=%d nb=%d", T, V, nb), part, fin)
			planLine(&b, "logsoftmax_finish", fmt.Sprintf("T=%d V=%d", T, V), planLogSoftmaxFinish(T, V))
		}
		for _, nseg := range []int{1, 2, 8} {
			seg, tree := planLogSoftmaxSum(T, nseg)
			planLine(&b, "logsoftmax_sum", fmt.Sprintf("T=%d nseg=%d", T, nseg), seg, tree)
		}
		planLine(&b, "logprobs", fmt.Sprintf("T=%d", T), planLogProbs(T))
		planLine(&b, "sample", fmt.Sprintf("T=%d", T), planSample(T))
	}
	return b.Bytes()
}

func matmulLine(b *bytes.Buffer, l Limits, p kernels.Profile, M, K, N, tp int, bounds []int, tree bool) {
	vec := K%4 == 0
	for _, v := range bounds {
		vec = vec && v%4 == 0
	}
	pl := planMatmul(l, M, K, N, bounds, tree, vec, tileConfig{})
	planLine(b, "matmul", fmt.Sprintf("profile=%s M=%d K=%d N=%d tp=%d bounds=%s tree=%t vec=%t g=%d part=%d stack=%d",
		p, M, K, N, tp, joinInts(bounds), tree, vec, pl.Tile.g, pl.PartFloats, pl.StackFloats), pl.Launches...)
}

func TestLaunchPlans(t *testing.T) {
	if rulesErr != nil {
		t.Fatal(rulesErr)
	}
	golden.Check(t, launchPlansFile, launchPlans(h200), "go test ./kernels/cuda -run LaunchPlans -update")
}

// TestLaunchPlanFacts: the plans' choices that the kernels' speed figures rest on (docs/gpu.md).
func TestLaunchPlanFacts(t *testing.T) {
	for _, c := range []struct {
		M, g   int
		kernel string
	}{{1, 0, "matmul_dec1"}, {3, 0, "matmul_dec4"}, {32, 0, "matmul_dec32"}, {64, 1, "matmul_t64_vec"}, {128, 1, "matmul_t128_vec"},
		{256, 2, "matmul_t128_vec"}, {512, 4, "matmul_t128_vec"}, {1024, 8, "matmul_t128_vec"}, {4096, 8, "matmul_t128_vec"}} {
		b, tree := kernels.MatmulBounds(kernels.Canonical, c.M, 4096)
		pl := planMatmul(h200, c.M, 4096, 4096, b, tree, true, tileConfig{})
		if pl.Launches[0].Kernel != c.kernel || pl.Tile.g != c.g || (c.g > 0 && c.g < 8) != (len(pl.Launches) == 2) {
			t.Errorf("M = %d: %v (g %d), want %s with g = %d", c.M, pl.Launches, pl.Tile.g, c.kernel, c.g)
		}
	}
	// unaligned K (1001) takes matmul_small up to small_max_m rows, then the tiled kernel without 16-byte loads
	b, tree := kernels.MatmulBounds(kernels.Canonical, 16, 1001)
	if pl := planMatmul(h200, 16, 1001, 4096, b, tree, false, tileConfig{}); pl.Launches[0].Kernel != "matmul_small16" {
		t.Errorf("M = 16, K = 1001: %v", pl.Launches)
	}
	if pl := planMatmul(h200, 17, 1001, 4096, b, tree, false, tileConfig{}); pl.Launches[0].Kernel != "matmul_t64" {
		t.Errorf("M = 17, K = 1001: %v", pl.Launches)
	}
}

func TestLaunchRulesStrict(t *testing.T) {
	if _, err := parseRules([]byte(`{"smem_reserve": 1, "nope": 2}`)); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("an unknown key: %v", err)
	}
	bad := bytes.Replace(launchJSON, []byte(`{"mt": 4, "span": 64, "stages": 2},`), nil, 1)
	if _, err := parseRules(bad); err == nil || !strings.Contains(err.Error(), "mt = 4") {
		t.Errorf("a missing dec entry: %v", err)
	}
	zero := bytes.Replace(launchJSON, []byte(`"tile_block": 256`), []byte(`"tile_block": 0`), 1)
	if _, err := parseRules(zero); err == nil {
		t.Error("a zero size was accepted")
	}
}

// TestLaunchRulesMatchSource: the numbers launch.json shares with the kernels' sources are theirs.
func TestLaunchRulesMatchSource(t *testing.T) {
	read := func(f string) string {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	define := func(src, name string) int {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)$`).FindStringSubmatch(src)
		if m == nil {
			t.Fatalf("no #define %s", name)
		}
		v, _ := strconv.Atoi(m[1])
		return v
	}
	att := read("attention.cu")
	a := rules.Attention
	if define(att, "ATT_KB") != a.KB || define(att, "ATT_WARPS") != a.Warps || define(att, "ATT_WARPS")*define(att, "ATT_TPW") != a.Tasks {
		t.Errorf("attention.cu's ATT_KB/ATT_WARPS/ATT_TPW are not launch.json's kb %d, warps %d, tasks %d", a.KB, a.Warps, a.Tasks)
	}
	if define(read("logsoftmax.cu"), "LSC") != rules.LogSoftmax.Chunk {
		t.Errorf("logsoftmax.cu's LSC is not launch.json's chunk %d", rules.LogSoftmax.Chunk)
	}
	mm := read("matmul.cu")
	small := regexp.MustCompile(`(?m)^SMALL\((\d+), (\d+)\)$`).FindAllStringSubmatch(mm, -1)
	if len(small) == 0 {
		t.Fatal("matmul.cu instantiates no SMALL")
	}
	for mt := 1; mt <= rules.Matmul.SmallMaxM; mt *= 2 {
		found := false
		for _, s := range small {
			if s[1] == strconv.Itoa(mt) {
				found = true
				if s[2] != strconv.Itoa(rules.Matmul.SmallCols) {
					t.Errorf("SMALL(%s, %s): launch.json's small_cols is %d", s[1], s[2], rules.Matmul.SmallCols)
				}
			}
		}
		if !found {
			t.Errorf("matmul.cu has no SMALL(%d, …) for small_max_m %d", mt, rules.Matmul.SmallMaxM)
		}
	}
	entries := map[string]bool{}
	for _, m := range Modules() {
		src, err := PTX(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entryNames(src) {
			entries[e] = true
		}
	}
	for _, k := range rules.BigSmem {
		if !entries[k] {
			t.Errorf("launch.json's big_smem_kernels names %s, which no PTX module has", k)
		}
	}
	for dl := 1; 32*dl <= a.MaxHeadDim; dl *= 2 {
		if !strings.Contains(att, fmt.Sprintf("ATT_BLK(%d)\n", dl)) {
			t.Errorf("attention.cu has no ATT_BLK(%d) for head dims up to %d", dl, a.MaxHeadDim)
		}
	}
}

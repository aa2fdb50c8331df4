package cudakernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"bitalign/kernels"
)

// TestTCSimulated runs tc/tc_matmul.cu's, tc_wgmma.cu's and tc_tma.cu's kernels on the CPU (tc/sim: the source
// unchanged but for its PTX wrappers, every CUDA thread a std::thread, ldmatrix, mma.sync and wgmma exchanged
// across the lanes, the MMA's k-step as tc.1's model; TMA boxes copied with the 128-byte swizzle, mbarriers with
// their phases and transaction counts, wgmma's shared-memory descriptors read through the same swizzle) through
// the very launches planTC makes, and compares every output bitwise with
// kernels.MatmulTC / MatmulTCPartial: the kernels' tiling, pipeline, zero padding, segment tree, split over
// blocks and tc_finish, before any GPU runs them. It needs g++ (C++20) and skips without it.
func TestTCSimulated(t *testing.T) {
	sim := buildTCSim(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(160, 161))
	type kase struct {
		M, K, N  int
		specials bool
	}
	cases := []kase{{1, 100, 33, false}, {3, 1027, 7, false}, {17, 1000, 33, true}, {64, 24, 65, false},
		{65, 256, 129, false}, {130, 136, 17, true}, {100, 1027, 20, true}, {130, 384, 40, true}, {257, 512, 40, false},
		{1, 512, 50, false}, {9, 1024, 70, true}, {20, 160, 33, false}}
	// Every simulated thread is an OS thread: the whole sweep takes minutes on two cores. By default (CI) a
	// subset that still reaches every variant's kernel, both load paths, the split over blocks and tc_finish;
	// BITALIGN_TC_SIM=full runs all of it (267 launches with tc_tma.cu's, all bitwise equal on 2026-12-02: 17 minutes here, so run it with -timeout 30m).
	full := os.Getenv("BITALIGN_TC_SIM") == "full"
	if !full {
		cases = []kase{{3, 1027, 7, false}, {64, 24, 65, false}, {130, 136, 17, true}, {130, 384, 40, true},
			{1, 512, 50, false}, {9, 1024, 70, true}, {20, 160, 33, false}}
	}
	l := Limits{SMs: 132, SmemOptin: 232448}
	runs := 0
	var runPlan func(what string, pl TCPlan, b []int, dt int, xs, ws []float32, withBias bool, want []float32, K int)
	for _, c := range cases {
		x, w := tcData(r, c.M*c.K, 1, c.specials), tcData(r, c.N*c.K, 0.05, c.specials)
		bias := tcData(r, c.N, 0.1, false)
		files := func(name string, v any) string { return simFile(t, dir, name, v) }
		run := func(what string, b []int, vec bool, G, dt int, xs, ws []float32, withBias bool, want []float32, K int) {
			t.Helper()
			if c.M <= rules.TC.Dec64MaxM && vec && tcTMAOK(K, 0, 0, b) {
				// tc_mm_tmd: the cost model's plan, and three warps a block on two SMs (tiles of 48 columns
				// past N, several work items a block)
				runPlan(what, planTMD(l, c.M, K, c.N, b, G, 0), b, dt, xs, ws, withBias, want, K)
				runPlan(what, planTMD(Limits{SMs: 2, SmemOptin: l.SmemOptin}, c.M, K, c.N, b, G, 3), b, dt, xs, ws, withBias, want, K)
			}
			for _, path := range tcPaths {
				if path != TCPathMMASync && path != TCPathTMAPAll && c.M <= rules.TC.Dec64MaxM {
					continue
				}
				if (path == TCPathTMA || path == TCPathTMAP || path == TCPathTMAPAll) && (!vec || !tcTMAOK(K, 0, 0, b)) { // TMA loads only what tcTMAOK admits
					continue
				}
				bns := []int{0}
				if path == TCPathTMAPAll && c.M > rules.TC.Dec64MaxM {
					continue // the same plans as tmap there
				}
				if (path == TCPathTMAP || path == TCPathTMAPAll) && G <= 1 { // both chain widths (the rule picks 128 at these sizes)
					bns = []int{128, 256}
				}
				for _, bn := range bns {
					runPlan(what, planTC(l, c.M, K, c.N, b, vec, path, G, bn), b, dt, xs, ws, withBias, want, K)
				}
			}
		}
		runPlan = func(what string, pl TCPlan, b []int, dt int, xs, ws []float32, withBias bool, want []float32, K int) {
			t.Helper()
			xf, wf, bf := files("x.bin", bf16Bits(xs)), files("w.bin", bf16Bits(ws)), "-"
			if withBias {
				bf = files("bias.bin", bias)
			}
			poison := make([]float32, c.M*c.N)
			for i := range poison {
				poison[i] = math.Float32frombits(0x7FBADBAD)
			}
			of, pf := files("out.bin", poison), "-"
			if pl.Parts > 1 {
				pp := make([]float32, pl.Parts*c.M*c.N)
				for i := range pp {
					pp[i] = math.Float32frombits(0x7FBADBAD)
				}
				pf = files("part.bin", pp)
			}
			l0 := pl.Launches[0]
			args := []string{l0.Kernel, itoa(l0.Grid.X), itoa(max(l0.Grid.Y, 1)), itoa(max(l0.Grid.Z, 1)), itoa(l0.Block.X),
				itoa(l0.Smem), itoa(c.M), itoa(K), itoa(c.N), itoa(pl.G), itoa(dt), itoa(len(b) - 1)}
			for _, v := range b {
				args = append(args, itoa(v))
			}
			args = append(args, xf, wf, bf, of, pf)
			persist := strings.HasPrefix(l0.Kernel, "tc_mm_tma") && tmaPersistent(strings.Split(l0.Kernel, "_")[2])
			if persist {
				args = append(args, "0") // ob: float32 out
			}
			if strings.HasPrefix(l0.Kernel, "tc_mm_tmd") {
				args = append(args, itoa(pl.C), itoa(pl.S))
			}
			simRun(t, sim, args)
			if pl.Parts > 1 {
				l1 := pl.Launches[1]
				simRun(t, sim, []string{"tc_finish", itoa(l1.Grid.X), itoa(l1.Block.X), itoa(c.M), itoa(c.N), itoa(pl.Parts), itoa(dt), bf, of, pf})
			}
			got := make([]float32, c.M*c.N)
			raw, err := os.ReadFile(of)
			if err != nil || len(raw) != 4*len(got) {
				t.Fatalf("%s: out.bin: %v (%d bytes)", what, err, len(raw))
			}
			for i := range got {
				got[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			runs++
			if !same(t, fmt.Sprintf("%s (%s, G=%d, parts %d)", what, l0.Kernel, pl.G, pl.Parts), got, want) {
				t.FailNow()
			}
			if persist && pl.Parts == 1 && dt == DTCode(kernels.BF16) { // MatmulTCBF16's plan: bf16 bits from the epilogue
				ph := make([]uint16, c.M*c.N)
				for i := range ph {
					ph[i] = 0x7FBD
				}
				args[len(args)-3], args[len(args)-1] = files("outh.bin", ph), "1"
				simRun(t, sim, args)
				raw, err := os.ReadFile(args[len(args)-3])
				if err != nil || len(raw) != 2*len(ph) {
					t.Fatalf("%s: outh.bin: %v (%d bytes)", what, err, len(raw))
				}
				for i := range ph {
					ph[i] = binary.LittleEndian.Uint16(raw[2*i:])
				}
				runs++
				if !sameBF16(t, fmt.Sprintf("%s (%s, bf16 out)", what, l0.Kernel), ph, want) {
					t.FailNow()
				}
			}
		}
		vecOK := c.K%8 == 0
		for _, lay := range []kernels.TCLayout{kernels.ColumnParallel, kernels.RowParallel} {
			b, _ := kernels.TCBounds(lay, c.K)
			for _, v := range b {
				vecOK = vecOK && v%8 == 0
			}
			for _, withBias := range []bool{false, true} {
				// the subset: row-parallel with bias (bf16), column-parallel without, and with it above dec64_max_m
				// too (MatmulTCBF16's bf16 epilogue of the persistent chains)
				if !full && ((lay == kernels.RowParallel && !withBias) || (lay == kernels.ColumnParallel && withBias && c.M <= rules.TC.Dec64MaxM)) {
					continue
				}
				dt, bp := kernels.F32, []float32(nil)
				if withBias {
					dt, bp = kernels.BF16, bias
				}
				want := make([]float32, c.M*c.N)
				if err := kernels.MatmulTC(lay, dt, want, x, w, bp, c.M, c.K, c.N); err != nil {
					t.Fatal(err)
				}
				gs := []int{0}
				if lay == kernels.RowParallel {
					gs = []int{1, 2, 4, 8}
					if !full {
						gs = []int{1, 8}
					}
				}
				for _, G := range gs {
					for _, vec := range []bool{false, true} {
						if (vec && !vecOK) || (!full && vec != vecOK) {
							continue
						}
						run(fmt.Sprintf("%v M=%d K=%d N=%d bias=%v vec=%v", lay, c.M, c.K, c.N, withBias, vec), b, vec, G, DTCode(dt), x, w, withBias, want, c.K)
					}
				}
			}
		}
		for _, tp := range []int{2, 8} {
			if c.K%tp != 0 || (!full && tp == 2) {
				continue
			}
			kl := c.K / tp
			xr, wr := columns(x, c.M, c.K, kl, 2*kl), columns(w, c.N, c.K, kl, 2*kl) // rank 1
			want := make([]float32, c.M*c.N)
			if err := kernels.MatmulTCPartial(want, xr, wr, c.M, kl, c.N, tp); err != nil {
				t.Fatal(err)
			}
			b, _, _ := kernels.TCPartialBounds(kl, tp)
			vec := kl%8 == 0
			for _, v := range b {
				vec = vec && v%8 == 0
			}
			run(fmt.Sprintf("partial tp=%d M=%d K=%d N=%d", tp, c.M, c.K, c.N), b, vec, 0, NoRound, xr, wr, false, want, kl)
		}
	}
	t.Logf("%d simulated launches bitwise equal to kernels.MatmulTC", runs)
}

// buildTCSim builds the tc kernels' CPU simulation (tc/sim/main.cpp) in a test's temporary directory; it skips
// without a g++ that has C++20's <barrier>.
func buildTCSim(t *testing.T) string {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ here: the CPU simulation of tc_matmul.cu is not built (skipped, not passed)")
	}
	dir := t.TempDir()
	probe := filepath.Join(dir, "probe.cpp") // a g++ without C++20's <barrier> cannot build the simulation at all
	if err := os.WriteFile(probe, []byte("#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cxx, "-std=c++20", "-o", filepath.Join(dir, "probe"), probe, "-pthread").CombinedOutput(); err != nil {
		t.Skipf("%s has no C++20 <barrier> (%v: %s): the CPU simulation of tc_matmul.cu is not built (skipped, not passed)", cxx, err, out)
	}
	sim := filepath.Join(dir, "tc_sim")
	build := exec.Command(cxx, "-std=c++20", "-O1", "-ffp-contract=off", "-DBITALIGN_TC_SIM", "-I", ".", "-o", sim,
		"tc/sim/main.cpp", "-pthread")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the tc simulation: %v\n%s", err, out)
	}
	return sim
}

func itoa(v int) string { return strconv.Itoa(v) }

// simFile writes v (binary.Write, little-endian) to dir/name for tc_sim and returns the path.
func simFile(t *testing.T, dir, name string, v any) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := binary.Write(f, binary.LittleEndian, v); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func simRun(t *testing.T, sim string, args []string) {
	t.Helper()
	out, err := exec.Command(sim, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("tc_sim %v: %v\n%s", args, err, out)
	}
}

package cudakernels

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"bitalign/cuda"
	"bitalign/kernels"
)

// NoRound is the dt code for "no output rounding at all" (MatmulPartial's subtree, the engine's Add).
const NoRound = -1

// Kernels holds the loaded modules of one device and a scratch buffer for intermediate results (matmul
// partials, log-softmax statistics). Use it from the device thread only (inside cuda.Device.Do); everything
// is enqueued on the default stream, in order.
type Kernels struct {
	dev          *cuda.Device
	fn           map[string]*cuda.Function
	scratch      cuda.Ptr
	scratchBytes int64
	tile         tileConfig // tests and benchmarks: force the tiled matmul's shape (zero fields: automatic)
	lim          Limits     // what the launch rules read of the device
	aux          cuda.Ptr   // small per-row statistics (log-softmax partials), separate from scratch
	auxBytes     int64
	stash        cuda.Ptr // the persistent tc tree's open subtrees (tc_tma.cu, tma128tp), separate from both
	stashBytes   int64
	// general (tests and benchmarks) makes canonical RMSNorm and attention run rmsnorm and attention, the
	// kernels that production runs for the standard profile and for rows or head groups the per-row and
	// per-tile kernels cannot hold, so that the tests cover them at every shape.
	general   bool
	tcErr     error  // why the tc kernels are not loaded (nil: they are; tc.go)
	tcWGErr   error  // why the tc wgmma kernels are not loaded too (nil: they are)
	tcTMAErr  error  // why the tc TMA kernels are not loaded too (nil: they are)
	tcAttErr  error  // why tc_attention is not loaded (nil: it is; tc_attention.go)
	tcAttMain bool   // tests: tc attention always runs tc_attn_hd<hd>, also where tc_attn_dec_hd<hd> would
	tcG       int    // tests: force the tc matmul's segments per block (0: automatic)
	tcBN      int    // tests, benchmarks: force the tmap chain's tile width, 128 or 256 (0: tmapNarrow)
	tcPath    TCPath // tests and benchmarks: force the tc family of M > dec64_max_m ("": launch.json's big_order)
	tcDec     string // tests and benchmarks: force the tc family of M ≤ dec64_max_m, "tmd" or "mma" ("": launch.json's dec_path)
	tcC       int    // tests: force tmd's consumer warps a block (0: planTMD's cost model)
}

// Load loads every PTX module on c's device and looks up its kernels. Errors wrap the driver's (an unusable
// PTX, e.g. from a newer nvcc than the driver, is CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
func Load(c *cuda.Ctx) (*Kernels, error) {
	if rulesErr != nil {
		return nil, rulesErr
	}
	k := &Kernels{dev: c.Device(), fn: map[string]*cuda.Function{}, lim: limitsOf(c.Device())}
	for _, mod := range Modules() {
		if mod == tcModule || mod == tcWGModule || mod == tcTMAModule || mod == tcAttModule {
			continue // loadTC, below
		}
		src, err := PTX(mod)
		if err != nil {
			return nil, err
		}
		m, err := c.LoadModule(src)
		if err != nil {
			return nil, fmt.Errorf("cudakernels: loading %s.ptx: %w", mod, err)
		}
		for _, name := range entryNames(src) {
			f, err := c.Function(m, name)
			if err != nil {
				return nil, err
			}
			if mt, ok := strings.CutPrefix(name, "matmul_dec"); ok {
				n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSuffix(mt, WeightSuffix(kernels.BF16)), WeightSuffix(kernels.F16)))
				if _, _, ok := rules.dec(n); err != nil || !ok {
					return nil, fmt.Errorf("cudakernels: %s has no entry in launch.json's matmul.dec", name)
				}
				if err := f.SetMaxDynamicSharedMemory(c, decSharedBytes(n)); err != nil {
					return nil, fmt.Errorf("cudakernels: %s: %w", name, err)
				}
			}
			if rules.bigSmem(name) {
				if err := f.SetMaxDynamicSharedMemory(c, k.lim.rowSmem()); err != nil {
					return nil, fmt.Errorf("cudakernels: %s: %w", name, err)
				}
			}
			k.fn[name] = f
		}
	}
	k.loadTC(c)
	return k, nil
}

// WeightSuffix names a kernel's twin that reads weights stored as dt (kernels.WeightDTypes): "" for float32,
// "_bf16w" for bf16 bits, "_f16w" for IEEE half bits (the checkpoint's bits, widened exactly as they are loaded:
// the same bits as the float32 kernel on the widened values): matmul_dec1_bf16w, embedding_f16w. Every twin
// has its float32 kernel's plan (grid, block, shared memory): only the name changes.
func WeightSuffix(dt kernels.DType) string {
	switch dt {
	case kernels.BF16:
		return "_bf16w"
	case kernels.F16:
		return "_f16w"
	}
	return ""
}

// weightKernel reports whether name is a float32 kernel that reads a weight (each matmul variant, the embedding
// and the RMSNorm kernels), the kernels that have a twin per weight dtype.
func weightKernel(name string) bool {
	if name == "embedding" || name == "rmsnorm" || name == "rmsnorm_row" {
		return true
	}
	if !strings.HasPrefix(name, "matmul_") || name == "matmul_reduce" {
		return false
	}
	for _, dt := range kernels.WeightDTypes {
		if s := WeightSuffix(dt); s != "" && strings.HasSuffix(name, s) {
			return false
		}
	}
	return true
}

// HasWeights reports whether the loaded PTX has the dt twin of every kernel that reads a weight (each matmul
// variant, the embedding and the RMSNorm kernels): only then may weights of dt live on the device in dt. PTX built before
// those kernels existed has none, and such weights are uploaded widened to float32. Float32 is always there.
func (k *Kernels) HasWeights(dt kernels.DType) bool {
	if !kernels.IsWeightDType(dt) {
		return false
	}
	suf := WeightSuffix(dt)
	n := 0
	for name := range k.fn {
		if weightKernel(name) {
			if k.fn[name+suf] == nil {
				return false
			}
			n++
		}
	}
	return n > 0
}

// entryNames lists the ".visible .entry NAME(" kernels of a PTX module.
func entryNames(ptx []byte) []string {
	var names []string
	s := string(ptx)
	const tag = ".visible .entry "
	for {
		i := strings.Index(s, tag)
		if i < 0 {
			return names
		}
		s = s[i+len(tag):]
		j := 0
		for j < len(s) && s[j] != '(' && s[j] != ' ' && s[j] != '\n' {
			j++
		}
		names = append(names, s[:j])
	}
}

// Close frees the scratch buffers (modules go with the context).
func (k *Kernels) Close(c *cuda.Ctx) error {
	err := c.Free(k.scratch)
	if e := c.Free(k.aux); err == nil {
		err = e
	}
	if e := c.Free(k.stash); err == nil {
		err = e
	}
	k.scratch, k.scratchBytes, k.aux, k.auxBytes, k.stash, k.stashBytes = 0, 0, 0, 0, 0, 0
	return err
}

// Scratch returns a device buffer of at least bytes, reused across calls (stream-ordered: safe for the
// next kernel on the default stream). Growing it synchronises the device first.
func (k *Kernels) Scratch(c *cuda.Ctx, bytes int64) (cuda.Ptr, error) {
	return grow(c, &k.scratch, &k.scratchBytes, bytes, "scratch")
}

// auxBuf is a second buffer like Scratch, for kernels' own partials while the caller's data sits in Scratch.
func (k *Kernels) auxBuf(c *cuda.Ctx, bytes int64) (cuda.Ptr, error) {
	return grow(c, &k.aux, &k.auxBytes, bytes, "aux")
}

func grow(c *cuda.Ctx, p *cuda.Ptr, have *int64, bytes int64, what string) (cuda.Ptr, error) {
	if bytes <= *have {
		return *p, nil
	}
	if *p != 0 {
		if err := c.Synchronize(); err != nil {
			return 0, err
		}
		if err := c.Free(*p); err != nil {
			return 0, err
		}
		*p, *have = 0, 0
	}
	n := max(bytes, 1<<20)
	q, err := c.Alloc(n)
	if err != nil {
		return 0, fmt.Errorf("cudakernels: %s of %d bytes: %w", what, n, err)
	}
	*p, *have = q, n
	return q, nil
}

func (k *Kernels) launch(c *cuda.Ctx, l Launch, args ...any) error {
	f := k.fn[l.Kernel]
	if f == nil {
		return fmt.Errorf("cudakernels: kernel %s is not in the loaded PTX (stale PTX? run make ptx)", l.Kernel)
	}
	return c.Launch(f, l.Grid, l.Block, l.Smem, nil, args...)
}

// DTCode maps a kernels.DType to the kernels' dt code (the int the MatmulForward and ResidualForward take).
func DTCode(dt kernels.DType) int {
	switch dt {
	case kernels.BF16:
		return 1
	case kernels.F16:
		return 2
	}
	return 0
}

// profCode maps a profile to the kernels' prof code.
func profCode(p kernels.Profile) int {
	if p == kernels.Standard {
		return 1
	}
	return 0
}

// segs packs segment boundaries as the kernels' Segs struct (int n; int b[9]) by value.
func segs(b []int) []byte {
	buf := make([]byte, 40)
	binary.LittleEndian.PutUint32(buf, uint32(len(b)-1))
	for i, v := range b {
		binary.LittleEndian.PutUint32(buf[4+4*i:], uint32(int32(v)))
	}
	return buf
}

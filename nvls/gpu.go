package nvls

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"bitalign/cuda"
)

// The GPU transport: one process drives every GPU of the group, one rank per GPU. Each rank's calls run on its
// cuda.Device's locked OS thread (the device's primary context), peer access is enabled between every pair, and
// the kernels of nvls/cuda/collectives.cu read the peers' buffers directly over NVLink, summing in the tree
// order of docs/arithmetic.md §12: every rank gets the same bits, equal to the CPU transport's. Ranks meet on
// the GPU (flags in peer memory, release/acquire at system scope), never through the host; a rank that does not
// arrive within the timeout makes the waiting kernel stop and the call return a *TimeoutError.
//
// NVLink multicast (cuMulticastCreate, multimem instructions, NCCL's NVLS) is never used: on the shared hosts
// this runs on it can put GPUs out of service.

// ElemType is the element type of a device-resident collective.
type ElemType uint8

const (
	ElemF32  ElemType = iota // float32
	ElemBF16                 // bfloat16 as uint16 bits; sums are taken in float32 and rounded once (nearest even)
)

// Size is the element's size in bytes.
func (e ElemType) Size() int64 {
	if e == ElemBF16 {
		return 2
	}
	return 4
}

func (e ElemType) String() string {
	if e == ElemBF16 {
		return "bf16"
	}
	return "f32"
}

// Algo chooses the all-reduce kernel. All compute the same tree from the same inputs: the choice never
// changes a bit, only the time. AlgoAuto takes push up to GPUConfig.OneShotMax bytes (one-shot when the push
// slots do not fit the buffer) and two-phase above.
type Algo uint8

const (
	AlgoAuto     Algo = iota
	AlgoOneShot       // every rank reads every peer's whole message and reduces all of it
	AlgoPush          // every rank writes its message into every peer's memory, then each reduces locally
	AlgoTwoPhase      // each rank reduces its chunk reading every rank's input in place, then all-gather
)

// Defaults of the GPU transport.
const (
	DefaultGPUBuffer = 64 << 20 // bytes per scratch half: larger collectives run in pieces
	// DefaultOneShotMax is AlgoAuto's switch from the one-shot kernels to the two-phase one for more than 2
	// ranks: there one-shot moves (n-1)·N bytes over NVLink against the two-phase's 2(n-1)/n·N, which should
	// outweigh its second barrier (~3 µs) from a few hundred KiB (unmeasured: only 2 GPUs were available).
	DefaultOneShotMax = 256 << 10
	// DefaultOneShotMax2 is the switch for 2 ranks, measured on 2×H200: both move N bytes over NVLink; push
	// won up to 8 MiB (34.6 against 37.1 µs), tied at 16 MiB (64.2 / 63.5 µs) and lost above (32 MiB: 128.9 /
	// 118.3 µs; 64 MiB: 246.4 / 231.1 µs), where the two-phase kernel's reads beat the push kernel's writes.
	DefaultOneShotMax2    = 16 << 20
	gpuForever            = 24 * time.Hour                     // WithTimeout(0) ("wait forever"): a kernel still needs a bound
	gpuThreads            = 512                                // NVLS_THREADS
	gpuMaxRanks           = 8                                  // NVLS_MAX_RANKS
	gpuMaxBlocks          = 256                                // NVLS_MAX_BLOCKS
	gpuFlagBytes          = 2 * gpuMaxRanks * gpuMaxBlocks * 8 // u64 flags [phase][source rank][block]
	gpuCtrlBytes          = gpuFlagBytes + 256                 // flags, the error word, at +128 the input pointers
	gpuErrTimeoutPattern  = 0x4E560000                         // NVLS_ERR_TIMEOUT
	gpuErrMismatchPattern = 0x4E570000                         // NVLS_ERR_MISMATCH
)

// GPUConfig tunes the GPU transport; the zero value gives the defaults. Nothing here changes a bit of a result.
type GPUConfig struct {
	// Buffer is the scratch per rank in bytes per half (two halves, as much again for host-slice results, and
	// as much page-locked host memory for their staging); default DefaultGPUBuffer. Larger all-reduces run in
	// pieces; the push kernel needs Size() slots of the message; device-resident reduce-scatter and all-gather
	// need Size()·count·elemsize to fit.
	Buffer int64
	// Algo forces the all-reduce kernel (see AlgoAuto).
	Algo Algo
	// OneShotMax is the largest message AlgoAuto sends through a one-shot kernel; default DefaultOneShotMax2
	// for 2 ranks, DefaultOneShotMax for more.
	OneShotMax int64
	// MaxBlocks caps the thread blocks of one kernel; default the SM count (at most 256).
	MaxBlocks int

	// shareGPUs lets several ranks sit on one GPU (each with its own cuda.Device thread), for tests of 4 and
	// 8 ranks on a 2-GPU machine: their kernels must then run concurrently on that GPU, which CUDA allows but
	// does not promise (small MaxBlocks keeps them resident). A rank waiting for one that never got the GPU
	// times out.
	shareGPUs bool
}

// GPUGroup is a set of ranks, one per GPU, driven by this process.
type GPUGroup struct {
	n         int
	cfg       GPUConfig
	timeout   time.Duration
	maxBlocks int // blocks per kernel: the same on every rank (the smallest SM count, or cfg.MaxBlocks)
	comms     []*GPUComm
	owned     bool // the devices were opened by OpenGPUGroup and are closed by Close

	mu     sync.Mutex
	broken error // the first failure: a group whose ranks lost step cannot be used again
	closed bool
}

// OpenGPUGroup opens GPUs 0..n-1 and makes a group of them (n = 1, 2, 4 or 8); see NewGPUGroup.
func OpenGPUGroup(n int, cfg GPUConfig, opts ...Option) (*GPUGroup, error) {
	devs := make([]*cuda.Device, 0, n)
	closeAll := func() {
		for _, d := range devs {
			d.Close()
		}
	}
	for i := 0; i < n; i++ {
		d, err := cuda.Open(i)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("nvls: GPU group of %d: %w", n, err)
		}
		devs = append(devs, d)
	}
	g, err := NewGPUGroup(devs, cfg, opts...)
	if err != nil {
		closeAll()
		return nil, err
	}
	g.owned = true
	return g, nil
}

// NewGPUGroup makes a group with rank r on devs[r] (distinct devices that can reach each other's memory).
// It enables peer access, loads the kernels and allocates each rank's scratch, result and flag buffers.
// The devices stay the caller's (Close frees only what the group allocated). Options: WithTimeout (default
// DefaultTimeout; 0 or less means a day, since a waiting kernel needs a bound); WithOrder(Ring) is refused:
// the GPU transport implements the canonical tree only.
func NewGPUGroup(devs []*cuda.Device, cfg GPUConfig, opts ...Option) (*GPUGroup, error) {
	o := options{timeout: DefaultTimeout, order: Tree}
	for _, f := range opts {
		f(&o)
	}
	if o.order != Tree {
		return nil, fmt.Errorf("nvls: the GPU transport sums in the tree order only, not %v", o.order)
	}
	if o.timeout <= 0 {
		o.timeout = gpuForever
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = DefaultGPUBuffer
	}
	if cfg.OneShotMax == 0 {
		cfg.OneShotMax = DefaultOneShotMax
		if len(devs) <= 2 {
			cfg.OneShotMax = DefaultOneShotMax2
		}
	}
	n := len(devs)
	if _, err := ptxFor(n); err != nil {
		return nil, err
	}
	if cfg.Buffer < 4096 || cfg.Buffer%256 != 0 {
		return nil, fmt.Errorf("nvls: GPU buffer of %d bytes: want a multiple of 256, at least 4096", cfg.Buffer)
	}
	seen := map[int]bool{}
	for _, d := range devs {
		if seen[d.Ordinal()] && !cfg.shareGPUs {
			return nil, fmt.Errorf("nvls: ranks share GPU %d: the GPU transport needs one GPU per rank", d.Ordinal())
		}
		seen[d.Ordinal()] = true
		for _, p := range devs {
			if p.Ordinal() == d.Ordinal() {
				continue
			}
			ok, err := d.CanAccessPeer(p)
			if err != nil {
				return nil, fmt.Errorf("nvls: peer access %v → %v: %w", d, p, err)
			}
			if !ok {
				return nil, fmt.Errorf("nvls: GPU %d cannot read GPU %d's memory (no peer access): the GPU transport needs NVLink or PCIe peer access", d.Ordinal(), p.Ordinal())
			}
			if err := d.EnablePeerAccess(p); err != nil {
				return nil, fmt.Errorf("nvls: enabling peer access %d → %d: %w", d.Ordinal(), p.Ordinal(), err)
			}
		}
	}
	g := &GPUGroup{n: n, cfg: cfg, timeout: o.timeout, maxBlocks: gpuMaxBlocks}
	for _, d := range devs {
		g.maxBlocks = min(g.maxBlocks, d.SMCount())
	}
	if cfg.MaxBlocks > 0 {
		g.maxBlocks = min(cfg.MaxBlocks, gpuMaxBlocks)
	}
	for r, d := range devs {
		c, err := newGPUComm(g, r, d)
		if err != nil {
			g.free()
			return nil, err
		}
		g.comms = append(g.comms, c)
	}
	return g, nil
}

// Size is the number of ranks.
func (g *GPUGroup) Size() int { return g.n }

// Comm returns rank r's communicator.
func (g *GPUGroup) Comm(r int) *GPUComm { return g.comms[r] }

// Comms returns one Comm per rank, in rank order; each must be used by one goroutine at a time, and every rank
// must make the same sequence of calls with the same sizes.
func (g *GPUGroup) Comms() []Comm {
	out := make([]Comm, len(g.comms))
	for i, c := range g.comms {
		out[i] = c
	}
	return out
}

// Err returns the failure that made the group unusable, or nil.
func (g *GPUGroup) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("%w (GPU group)", ErrClosed)
	}
	return g.broken
}

// fail records the group's first failure; every later call of any rank returns it.
func (g *GPUGroup) fail(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.broken == nil {
		g.broken = err
	}
	return err
}

// Close waits until no GPU of the group runs work (a kernel still waiting for a peer gives up within the
// timeout), then frees the group's buffers and, for OpenGPUGroup, closes the devices. Freeing any earlier could
// pull memory from under a peer's kernel.
func (g *GPUGroup) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	var err error
	for _, c := range g.comms {
		err = errors.Join(err, c.dev.Synchronize())
	}
	err = errors.Join(err, g.free())
	if g.owned {
		for _, c := range g.comms {
			err = errors.Join(err, c.dev.Close())
		}
	}
	return err
}

func (g *GPUGroup) free() error {
	var err error
	for _, c := range g.comms {
		err = errors.Join(err, c.free())
	}
	return err
}

// GPUComm is one rank of a GPUGroup. It implements Comm on host slices (copying them to and from its GPU)
// and offers the same collectives on device memory (AllReduceDevice, ...) for a CUDA engine.
type GPUComm struct {
	g       *GPUGroup
	rank    int
	dev     *cuda.Device
	fns     map[kernelKey]*cuda.Function
	module  *cuda.Module
	stream  *cuda.Stream
	scratch cuda.Ptr // two halves of g.cfg.Buffer, used by call parity
	result  cuda.Ptr // g.cfg.Buffer: host-slice calls' results
	pinned  []byte   // page-locked: g.cfg.Buffer of staging for host slices, then the error word's copy
	ctrl    cuda.Ptr // flags [2][8][256]u64, then the error word (u32)
	epoch   uint32   // calls made so far: the same count on every rank
	lastOp  string   // the collective of the last launch, for errors
}

var _ Comm = (*GPUComm)(nil)

func newGPUComm(g *GPUGroup, rank int, d *cuda.Device) (*GPUComm, error) {
	c := &GPUComm{g: g, rank: rank, dev: d}
	ptx, err := ptxFor(g.n)
	if err != nil {
		return nil, err
	}
	err = d.Do(func(x *cuda.Ctx) error {
		m, err := x.LoadModule(ptx)
		if err != nil {
			return fmt.Errorf("nvls: loading the collectives' PTX on %v: %w", d, err)
		}
		c.module = m
		c.fns = map[kernelKey]*cuda.Function{}
		for _, k := range kernelKeys() {
			f, err := x.Function(m, k.name(g.n))
			if err != nil {
				return fmt.Errorf("nvls: %w", err)
			}
			c.fns[k] = f
		}
		if c.stream, err = x.NewStreamFlags(cuda.StreamNonBlocking); err != nil {
			return err
		}
		if c.scratch, err = x.Alloc(2 * g.cfg.Buffer); err != nil {
			return fmt.Errorf("nvls: scratch on %v: %w", d, err)
		}
		if c.result, err = x.Alloc(g.cfg.Buffer); err != nil {
			return fmt.Errorf("nvls: result buffer on %v: %w", d, err)
		}
		if c.pinned, err = x.HostAlloc(g.cfg.Buffer + 256); err != nil {
			return fmt.Errorf("nvls: page-locked staging for %v: %w", d, err)
		}
		if c.ctrl, err = x.Alloc(gpuCtrlBytes); err != nil {
			return err
		}
		if err := x.Memset32(c.ctrl, 0, gpuCtrlBytes/4); err != nil { // epoch 0: no call yet
			return err
		}
		return x.Synchronize()
	})
	if err != nil {
		c.free()
		return nil, err
	}
	return c, nil
}

func (c *GPUComm) free() error {
	if c.dev == nil {
		return nil
	}
	return c.dev.Do(func(x *cuda.Ctx) error {
		err := x.StreamSync(c.stream)
		for _, p := range []*cuda.Ptr{&c.scratch, &c.result, &c.ctrl} {
			err = errors.Join(err, x.Free(*p))
			*p = 0
		}
		if c.stream != nil {
			err = errors.Join(err, x.DestroyStream(c.stream))
			c.stream = nil
		}
		if c.pinned != nil {
			err = errors.Join(err, x.FreeHost(c.pinned))
			c.pinned = nil
		}
		if c.module != nil {
			err = errors.Join(err, c.module.Unload(x))
			c.module = nil
		}
		return err
	})
}

// Rank is this communicator's rank; Size the group's rank count.
func (c *GPUComm) Rank() int { return c.rank }
func (c *GPUComm) Size() int { return c.g.n }

// Close breaks the group, as a CPU group's Close does: later calls of every rank return an error wrapping
// ErrClosed (a kernel already waiting for this rank gives up at its timeout). Memory is freed by GPUGroup.Close.
func (c *GPUComm) Close() error {
	c.g.fail(fmt.Errorf("%w by rank %d", ErrClosed, c.rank))
	return nil
}

// Device is the GPU this rank runs on; Stream the stream its host-slice calls use.
func (c *GPUComm) Device() *cuda.Device { return c.dev }
func (c *GPUComm) Stream() *cuda.Stream { return c.stream }

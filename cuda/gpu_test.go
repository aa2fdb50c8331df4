package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"bitalign/internal/testgpu"
)

func openOrSkip(t *testing.T) *Device {
	t.Helper()
	d, err := Open(0)
	if err != nil {
		testgpu.SkipOrFail(t, err, "no GPU here (%v): skipped, not passed", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// testKernel loads testPTX on d and returns the module and its kernel name.
func testKernel(t *testing.T, d *Device, name string) (*Module, *Function) {
	t.Helper()
	m, err := d.LoadModule([]byte(testPTX))
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Function(name)
	if err != nil {
		t.Fatal(err)
	}
	return m, f
}

// testPTX holds add_one(p, n): p[i] += 1 for i < n, and fault(): a store to address 0.
const testPTX = `.version 8.0
.target sm_90
.address_size 64
.visible .entry add_one(.param .u64 p, .param .u32 n)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<5>;
	.reg .f32 %f<3>;
	ld.param.u64 %rd1, [p];
	ld.param.u32 %r1, [n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r5, 4;
	add.s64 %rd4, %rd2, %rd3;
	ld.global.f32 %f1, [%rd4];
	add.rn.f32 %f2, %f1, 0f3F800000;
	st.global.f32 [%rd4], %f2;
DONE:
	ret;
}
.visible .entry fault()
{
	.reg .b64 %rd<2>;
	.reg .b32 %r<2>;
	mov.u64 %rd1, 8;
	mov.u32 %r1, 1;
	st.global.u32 [%rd1], %r1;
	ret;
}
`

func TestDeviceRoundTripAndLaunch(t *testing.T) {
	d := openOrSkip(t)
	t.Logf("%v", d)
	m, f := testKernel(t, d, "add_one")
	if _, err := m.Function("no_such_kernel"); err == nil || !strings.Contains(err.Error(), "cuModuleGetFunction") {
		t.Errorf("missing kernel: err = %v", err)
	}
	const n = 1000
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(i) * 0.5
	}
	p, err := d.Alloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(p)
	if err := UploadTo(d, p, host); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(f, Dim3{X: (n + 127) / 128}, Dim3{X: 128}, 0, nil, p, uint32(n)); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := DownloadFrom(d, got, p); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(host[i]+1) {
			t.Fatalf("element %d = %v, want %v", i, got[i], host[i]+1)
		}
	}
	if err := d.Launch(f, Dim3{X: 1}, Dim3{X: 4096}, 0, nil, p, uint32(n)); err == nil {
		t.Error("a 4096-thread block launched")
	} else {
		t.Logf("oversized block: %v", err)
	}
}

func TestOutOfMemoryIsError(t *testing.T) {
	d := openOrSkip(t)
	_, err := d.Alloc(1 << 50)
	if !IsOutOfMemory(err) {
		t.Fatalf("Alloc(1 PiB) = %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	t.Logf("1 PiB: %v", err)
}

func TestManyGoroutines(t *testing.T) {
	d := openOrSkip(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				p, err := d.Alloc(4096)
				if err != nil {
					errs <- err
					return
				}
				src := []int32{int32(g), int32(i)}
				dst := make([]int32, 2)
				if err := UploadTo(d, p, src); err != nil {
					errs <- err
				}
				if err := DownloadFrom(d, dst, p); err != nil {
					errs <- err
				}
				if dst[0] != src[0] || dst[1] != src[1] {
					errs <- errors.New("round trip mismatch")
				}
				if err := d.Free(p); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A kernel fault poisons the context, so it runs in a child process.
func TestKernelFaultIsError(t *testing.T) {
	if os.Getenv("BITALIGN_CUDA_FAULT_CHILD") == "1" {
		d, err := Open(0)
		if err != nil {
			t.Fatal(err)
		}
		_, f := testKernel(t, d, "fault")
		err = d.Launch(f, Dim3{X: 1}, Dim3{X: 1}, 0, nil)
		if err == nil {
			err = d.Synchronize()
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("fault gave %v, want a CUDA error", err)
		}
		t.Logf("FAULT-ERROR %v", err)
		return
	}
	openOrSkip(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelFaultIsError$", "-test.v")
	cmd.Env = append(os.Environ(), "BITALIGN_CUDA_FAULT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "FAULT-ERROR cuda: cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestEventDoneOnSideStream: a copy into page-locked memory on a non-blocking stream, ordered after an event of
// the default stream; EventDone turns true once it has completed (never before the bytes are there), and the
// bytes are the device's.
func TestEventDoneOnSideStream(t *testing.T) {
	d := openOrSkip(t)
	const n = 64 << 20
	err := d.Do(func(c *Ctx) error {
		st, err := c.NewStreamFlags(StreamNonBlocking)
		if err != nil {
			return err
		}
		defer c.DestroyStream(st)
		host, err := c.HostAlloc(n)
		if err != nil {
			return err
		}
		defer c.FreeHost(host)
		p, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer c.Free(p)
		e, err := c.NewEvent()
		if err != nil {
			return err
		}
		defer c.DestroyEvent(e)
		if err := c.Memset8Async(p, 0x5a, n, nil); err != nil {
			return err
		}
		if err := c.Record(e, nil); err != nil {
			return err
		}
		if err := c.WaitEvent(st, e); err != nil {
			return err
		}
		if err := c.CopyDtoHAsync(unsafe.Pointer(&host[0]), p, n, st); err != nil {
			return err
		}
		if err := c.Record(e, st); err != nil {
			return err
		}
		for i := 0; ; i++ {
			done, err := c.EventDone(e)
			if err != nil {
				return err
			}
			if done {
				break
			}
			if i > 1e7 {
				return fmt.Errorf("the copy never completed")
			}
		}
		for i := 0; i < n; i += 4093 {
			if host[i] != 0x5a {
				return fmt.Errorf("byte %d is %#x after EventDone, want 0x5a", i, host[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Package cudakernels runs bitalign's CUDA kernels: the twins of package kernels (docs/arithmetic.md), compiled
// to PTX by nvcc (`make ptx`, on a machine with nvcc) and embedded here with go:embed; the driver JIT-compiles
// the PTX when Load runs. MANIFEST.sha256 records the compiler, the flags and the SHA-256 of every source and
// PTX file (format and checker: internal/ptx); TestManifest fails when a .cu or .cuh file changed without its
// PTX being regenerated, or the Makefile's NVCCFLAGS changed.
//
// Every op has the name and argument order of its Go twin (MatmulForward ↔ kernels.MatmulForward ↔
// matmul.cu), takes device pointers, and is enqueued on the default stream from the device thread (a
// *cuda.Ctx inside cuda.Device.Do). The launchers take the canonical order's numbers from package kernels
// (kernels.MatmulBounds, kernels.PartialBounds, kernels.LocalSegments), never their own copies. Launch errors
// are returned at once; faults inside a kernel surface at the next synchronisation. The GPU tests compare
// every op bitwise with its Go twin; they skip without a GPU (and fail instead when BITALIGN_REQUIRE_GPU=1).
//
// BITALIGN_PTX_DIR, when set, loads the .ptx files from $BITALIGN_PTX_DIR/kernels/cuda (a tree that
// `make ptx PTX_OUT=dir` wrote) instead of the embedded ones: for testing freshly compiled kernels on the GPU
// machine in the same run that compiled them (scripts/gpu.sh).
package cudakernels

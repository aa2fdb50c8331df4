package kernels

// RandBF16 lends randBF16 to the external tests (package kernels_test).
var RandBF16 = randBF16

// TCOneChainPartial is the TP control of the tc row-parallel matmul: each rank one chain over its local K (as
// the standard profile's MatmulPartial), so the ranks' sums meet in another order than the 8-segment tree.
func TCOneChainPartial(out, x, w []float32, M, kLocal, N int) error {
	return matmulTC("TCOneChainPartial", out, x, WeightsF32(w), M, kLocal, N, []int{0, kLocal}, false, epilogue{raw: true})
}

// Columns lends columns to the external tests.
var Columns = columns

//go:build !amd64

package kernels

// haveTCAVX2 is false: tcProducts16 exists only in tc_amd64.s.
var haveTCAVX2 = false

func tcProducts16(ae, am, be, bm *int16, xc int32) (e int32, sum int64) {
	panic("kernels: tcProducts16 without AVX2")
}

package kernels

import "golang.org/x/sys/cpu"

// haveTCAVX2: tcStep's product half runs as tcProducts16 (tc_amd64.s).
var haveTCAVX2 = cpu.X86.HasAVX2

// tcProducts16 is the product half of one tc k-step on 16 decoded pairs (tc_amd64.s): the alignment exponent
// e = max(xc, ae_j + be_j) and the exact sum of the 16 products truncated to multiples of 2^(e−25).
//
//go:noescape
func tcProducts16(ae, am, be, bm *int16, xc int32) (e int32, sum int64)

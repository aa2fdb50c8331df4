//go:build !amd64

package logprobs

import "math"

// expInto sets dst[i] = math.Exp(src[i]) for i < len(dst) (on amd64, exp_amd64.go's copy of math.Exp four
// lanes at a time).
func expInto(dst, src []float64) {
	for i := range dst {
		dst[i] = math.Exp(src[i])
	}
}

package kernels

import "fmt"

// checkLen panics when a slice is shorter than its shape says: a programming error in the caller, never data.
func checkLen(op, name string, s []float32, n int) {
	if len(s) < n {
		panic(fmt.Sprintf("kernels: %s: %s has %d elements, shape needs %d", op, name, len(s), n))
	}
}

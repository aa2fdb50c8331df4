//go:build !unix

package session

import "time"

// cpuTime is not measured here (see cputime_unix_test.go): the size benchmarks report 0 CPU seconds.
func cpuTime() time.Duration { return 0 }

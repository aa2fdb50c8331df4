//go:build unix

package session

import (
	"syscall"
	"time"
)

// cpuTime is the process's user + system CPU time so far (the size benchmarks' steadier figure on a shared
// machine, where wall time depends on the other processes).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package capture

import "syscall"

// minorFaults is the process's count of minor page faults so far (-1 where unknown).
func minorFaults() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return int64(ru.Minflt) + int64(ru.Majflt)
}

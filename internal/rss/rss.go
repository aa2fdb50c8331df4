// Package rss reads this process's resident memory: the figures the peak-memory goals are stated in.
package rss

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Peak is the process's peak resident set so far in bytes: VmHWM from /proc/self/status, or getrusage's maximum
// where /proc is absent (kB on Linux; macOS reports bytes, so there it over-states by 1024).
func Peak() int64 {
	if v := status("VmHWM:"); v >= 0 {
		return v
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck
	return int64(ru.Maxrss) << 10
}

// status is the kB figure of key in /proc/self/status in bytes, -1 when absent.
func status(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

//go:build !linux

package capture

func minorFaults() int64 { return -1 }

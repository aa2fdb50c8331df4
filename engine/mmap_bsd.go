//go:build unix && !linux

package engine

// mapPopulate is 0 where mmap has no MAP_POPULATE: pages fault in as they are first read.
const mapPopulate = 0

package engine

import "syscall"

// mapPopulate pre-faults a checkpoint's mapping (see mapFile).
const mapPopulate = syscall.MAP_POPULATE

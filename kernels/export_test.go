package kernels

// RandBF16 lends randBF16 to the external tests (package kernels_test).
var RandBF16 = randBF16

// Columns lends columns to the external tests.
var Columns = columns

package main

import (
	"errors"

	"bitalign/engine"
)

// cudaBackend opens the GPU engine backend.
func cudaBackend() (engine.BackendFactory, string, error) {
	return nil, "", errors.New("the CUDA engine backend is not available in this build")
}

package engine

import (
	"fmt"
	"path/filepath"

	"bitalign/kernels"
)

// CheckProfile returns nil when kernel profile p can run a model of cfg (kernels.Profile.Serves: the tc profile
// serves bf16 models with head dims a multiple of 16), else an error; checkpoint, when not "", is the model's
// directory and the error names its config.json (where the dtype and head dim come from). Every mode that runs a
// profile (Train, Sample, Replay, RunOp) calls it before it places a weight.
func CheckProfile(p kernels.Profile, cfg Config, checkpoint string) error {
	err := p.Serves(kdt(cfg.DType), cfg.HeadDim)
	if err == nil {
		return nil
	}
	if checkpoint != "" {
		return fmt.Errorf("engine: %s: %w", filepath.Join(checkpoint, "config.json"), err)
	}
	return fmt.Errorf("engine: %s model: %w", cfg.Architecture, err)
}

// profileServer is a Backend that runs some profiles only (the CUDA backend: tc needs the tc PTX modules).
type profileServer interface {
	ServesProfile(p kernels.Profile) error // nil: this backend runs p's kernels
}

// checkBackend returns why backend be cannot run one of the profiles of v (nil: it can), before any weight is
// placed on it.
func checkBackend(be Backend, v variant) error {
	ps, ok := be.(profileServer)
	if !ok {
		return nil
	}
	for _, p := range []kernels.Profile{v.matmul, v.attn, v.router, v.experts, v.norm, v.softmax} {
		if err := ps.ServesProfile(p); err != nil {
			return err
		}
	}
	return nil
}

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

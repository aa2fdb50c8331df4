"""bitalign: the deterministic kernels of docs/arithmetic.md for PyTorch programs.

This package grows into the PyTorch library of the issue "The fix, not just the finding": the very PTX the Go
engine embeds (kernels/cuda/*.ptx, checked against kernels/cuda/MANIFEST.sha256 at load), launched on PyTorch's
stream. What is here so far works without a GPU:

- bitalign.ptx: finds the PTX (inside an installed wheel, or the repository's kernels/cuda in a checkout) and
  verifies every module against the manifest before anything may load it;
- bitalign.launch: the launch rules (kernels/cuda/launch.json, which the Go launchers read too) and the plans
  made from them: which kernel variant, grid, block and shared memory an op takes for a shape, the same as Go's
  (kernels/cuda/testdata/launch_plans.tsv pins both);
- bitalign.rope: the engine's RoPE tables, bit for bit (kernels/testdata/rope_vectors.tsv pins them);
- bitalign.sampling: the sampling noise's key derivation (docs/arithmetic.md §10: Philox4x32-10 keyed by
  (seed, sequence, position), never by batch slot), pinned by kernels/testdata/sampling_vectors.tsv, the table
  the Go reference writes; top-p's walk and the whole rule (draw), pinned by kernels/testdata/topkp_vectors.tsv;
- bitalign.mathf: the engine's float32 FMA, Exp and Log in numpy (kernels/testdata/mathf_vectors.tsv).

On a CUDA GPU, bitalign.ops runs the kernels as torch.library custom ops, and bitalign.hf patches a Hugging Face
Llama, Qwen2 or Qwen3 so that it computes the engine's op sequence with them (docs/kernels-torch.md);
bitalign.tp shards such a model over torch.distributed with the engine's TP-invariant layers (the row-parallel
partials all-gathered and added by the tree, never all-reduced), and bitalign.cpu holds the exact CPU twins
those layers run on CPU tensors. None is imported here (they need torch, and bitalign.hf transformers).

It ships in the same distribution as bitalign_capture (capture/python/pyproject.toml): one pip install.
"""

from . import launch, mathf, ptx, rope, sampling

__all__ = ["launch", "mathf", "ptx", "rope", "sampling"]

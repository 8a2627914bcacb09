"""goldenenv: golden environments for GPU training clusters."""

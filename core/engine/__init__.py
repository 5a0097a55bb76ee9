"""Engine, scheduler, block manager, sequence, runner, attention, KV cache, reuse memory and explainer."""

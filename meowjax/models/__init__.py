"""meowjax.models: the Llama/Qwen2 decoder family.

- `config`: `ModelConfig`, `PRESETS`, `get_preset`.
- `lm`: `init_params`, `forward`, `hidden_states(_masked)`, `token_logprobs`, `logical_axes`,
  KV cache (`init_cache`, `decode_step`).
- `decode`: one-token decode in the feature-major layout (the CPU sampler's decode step).
- `attention`: grouped-query attention; causal self-attention over query blocks.
- `value`: value model (trunk + scalar head).
- `hf_io`: Hugging Face config/safetensors import and export; `gguf_io`: GGUF import.
"""

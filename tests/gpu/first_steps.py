# Copyright 2026 The GMLake Authors.
"""The growth figure of issue 17: llama1b full fine-tuning (AdamW, no
checkpointing), the model's creation and its first two steps, timed from
after CUDA starts. Run it under each lake in turn (tests/gpu/growth_compare.sh):

  python3 tests/gpu/first_steps.py            # native
  GMLAKE_CONF=lake:embedded gmlake run -- python3 tests/gpu/first_steps.py

Prints FIRST_STEPS {json}: seconds, peak allocated and reserved GiB; under
GMLake also GMLAKE_STATS {json}, its own counters.
"""
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
cfg = LlamaConfig(vocab_size=32000, max_position_embeddings=8192, hidden_size=2048, intermediate_size=5504,
                  num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16)
t0 = time.time()
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(dtype=torch.bfloat16)
model.config.use_cache = False
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
for bs, sl in ((4, 2048), (8, 1024)):
    x = torch.randint(0, 32000, (bs, sl), device="cuda")
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
seconds = time.time() - t0
st = torch.cuda.memory_stats()
print("FIRST_STEPS", json.dumps(dict(seconds=round(seconds, 3),
      peak_allocated_gib=round(st.get("allocated_bytes.all.peak", 0) / 2**30, 3),
      peak_reserved_gib=round(st.get("reserved_bytes.all.peak", 0) / 2**30, 3))), flush=True)
# Under GMLake: where the growth's time went (driver calls by kind, time in
# the lake's acquires), for diagnosis.
try:
    import gmlake
    gs = gmlake.memory_stats()
    print("GMLAKE_STATS", json.dumps({k: v for k, v in gs.items() if k.startswith("gmlake.")}), flush=True)
except Exception:  # native PyTorch: no GMLake here
    pass

# Copyright 2026 The GMLake Authors.
"""Where a process's time goes outside its work: the colocation trainer's
start (interpreter and imports, CUDA's start, the model built on the GPU in
fp32 and cast to bf16, AdamW's first step) and, with the shell's clock, its
exit. Prints one line: PHASES {json}. For start_phases.sh, which runs it
natively and under GMLake:

  START_NS=$(date +%s%N) python3 tests/gpu/start_phases.py [--shape 4096,11008,20]
"""
import argparse
import json
import os
import time

t_wrapper = time.time()
start = int(os.environ.get("START_NS", "0")) / 1e9 or t_wrapper
ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="4096,11008,20")
args = ap.parse_args()
import torch  # noqa: E402
t_torch = time.time()
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
t_imports = time.time()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
t_cuda = time.time()
h, i, n = (int(x) for x in args.shape.split(","))
cfg = LlamaConfig(vocab_size=32000, hidden_size=h, intermediate_size=i, num_hidden_layers=n,
                  num_attention_heads=h // 128, num_key_value_heads=h // 128,
                  max_position_embeddings=4096, use_cache=False)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg)
torch.cuda.synchronize()
t_fp32 = time.time()
model = model.to(torch.bfloat16)
torch.cuda.synchronize()
t_bf16 = time.time()
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
x = torch.randint(0, 32000, (2, 1024), device="cuda")
model(input_ids=x, labels=x).loss.backward()
opt.step()
torch.cuda.synchronize()
t_step = time.time()
st = torch.cuda.memory_stats()
print("PHASES", json.dumps(dict(
    boot_s=round(t_wrapper - start, 3), import_torch_s=round(t_torch - t_wrapper, 3),
    import_transformers_s=round(t_imports - t_torch, 3), cuda_start_s=round(t_cuda - t_imports, 3),
    model_fp32_s=round(t_fp32 - t_cuda, 3), to_bf16_s=round(t_bf16 - t_fp32, 3),
    first_step_s=round(t_step - t_bf16, 3), end_ns=int(time.time() * 1e9),
    reserved_gib=round(st.get("reserved_bytes.all.peak", 0) / 2**30, 2))), flush=True)

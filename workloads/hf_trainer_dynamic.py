# Hugging Face Trainer, unedited API, with dynamic padding: every batch is
# padded to its own longest sample, so each step has a new shape.
#   python3 hf_trainer_dynamic.py [--model llama1b] [--steps 24]
# Random-init Llama, bf16, AdamW, activation checkpointing, samples of 64-2048
# tokens. Prints RESULT {json} like llama_train.py.
import argparse, json, random, time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="llama1b", choices=["llama1b", "llama3b"])
ap.add_argument("--steps", type=int, default=24)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()
random.seed(args.seed)
torch.manual_seed(args.seed)
shapes = {
    "llama1b": dict(hidden_size=2048, intermediate_size=5504, num_hidden_layers=16, num_attention_heads=16),
    "llama3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=26, num_attention_heads=24),
}[args.model]
cfg = LlamaConfig(vocab_size=32000, max_position_embeddings=8192,
                  num_key_value_heads=shapes["num_attention_heads"], **shapes)
model = LlamaForCausalLM(cfg).to(dtype=torch.bfloat16)


class RandomText(torch.utils.data.Dataset):
    def __init__(self, n):
        self.lengths = [random.choice([64, 128, 300, 512, 777, 1024, 1500, 2048]) for _ in range(n)]

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, cfg.vocab_size, (self.lengths[i],), generator=g)}


def pad_to_longest(samples):
    n = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), n, dtype=torch.long)
    mask = torch.zeros(len(samples), n, dtype=torch.long)
    for i, s in enumerate(samples):
        ids[i, : len(s["input_ids"])] = s["input_ids"]
        mask[i, : len(s["input_ids"])] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


targs = TrainingArguments(output_dir="/tmp/hf_trainer_dynamic", per_device_train_batch_size=args.batch,
                          max_steps=args.steps, bf16=True, gradient_checkpointing=True,
                          gradient_checkpointing_kwargs={"use_reentrant": False}, learning_rate=1e-5,
                          report_to=[], save_strategy="no", logging_steps=args.steps, dataloader_num_workers=0,
                          seed=args.seed)
trainer = Trainer(model=model, args=targs, train_dataset=RandomText(args.steps * args.batch),
                  data_collator=pad_to_longest)
t0 = time.time()
trainer.train()
torch.cuda.synchronize()
stats = torch.cuda.memory_stats()
print("RESULT", json.dumps(dict(model=args.model, mode="hf_trainer_dynamic", steps=args.steps,
      peak_allocated_bytes=stats["allocated_bytes.all.peak"], peak_reserved_bytes=stats["reserved_bytes.all.peak"],
      seconds=time.time() - t0)), flush=True)

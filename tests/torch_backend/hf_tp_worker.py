"""README.md's Hugging Face recipe ("A Hugging Face model with tp_plan=\"auto\""), its second
block verbatim from the line after this docstring: test_hf_tp.py checks that the two are the same
text, then runs this file under torchrun with "fluxcpp" and with gloo and compares what each rank
saves against one process's generation."""
# hf_tp.py: scripts/python -m torch.distributed.run --nproc_per_node 2 hf_tp.py tiny-llama
import argparse
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM
import fluxcpp  # noqa: F401  registers "fluxcpp"

ap = argparse.ArgumentParser()
ap.add_argument("model")                         # a save_pretrained folder
ap.add_argument("--backend", default="fluxcpp")  # gloo: the same run on torch's own backend
ap.add_argument("--out")                         # a folder: each rank saves its tokens there
a = ap.parse_args()

dist.init_process_group(a.backend)  # before from_pretrained, which otherwise makes a gloo group
model = AutoModelForCausalLM.from_pretrained(a.model, tp_plan="auto")
# The weights are shards on this rank, and their collectives go to the group made above.
shards = [p for p in model.parameters() if isinstance(p, DTensor)]
assert any(p.to_local().numel() < p.numel() for p in shards), "the model was not split"
backends = {dist.get_backend(p.device_mesh.get_group()) for p in shards}
assert backends == {dist.get_backend()} == {a.backend}, (backends, dist.get_backend())

prompt = torch.tensor([[1, 5, 9, 2, 7]])  # token ids, e.g. a tokenizer's output
out = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                     output_logits=True, return_dict_in_generate=True)
print(f"rank {dist.get_rank()}: {out.sequences[0].tolist()}")
if a.out:
    torch.save({"prompt": prompt, "tokens": out.sequences, "logits": out.logits[0]},
               f"{a.out}/rank{dist.get_rank()}.pt")
dist.destroy_process_group()

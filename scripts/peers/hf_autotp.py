"""scripts/bench_hf_tp.py's "autotp" configuration: the same Hugging Face Llama split by DeepSpeed
AutoTP on CPU, deepspeed.init_inference(model, tensor_parallel={"tp_size": W}, dtype=...) with
replace_with_kernel_inject=False (AutoTP: its LinearLayer / LinearAllreduce in place of the
attention's and MLP's nn.Linear, every all-reduce through deepspeed.comm.inference_all_reduce,
DeepSpeed's shared-memory op). Run as one of torchrun's workers; the driver sets DS_ACCELERATOR=cpu
and LOCAL_SIZE = W (DeepSpeed's op takes its shared-memory path only when LOCAL_SIZE is the world
size). The default group is gloo: whatever AutoTP does not route through inference_all_reduce
runs there."""
import os
import time

import torch


def unlink_segment(rank):
    """Unlinks this rank's shared-memory segment of DeepSpeed's op (named by user, MASTER_ADDR,
    MASTER_PORT and rank; DeepSpeed never unlinks it). Call once every rank has opened them all:
    the mappings stay valid, and nothing is left in /dev/shm however the process ends."""
    name = (f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_{os.environ.get('MASTER_ADDR', '')}"
            f"_{os.environ.get('MASTER_PORT', '')}_{rank}")
    if os.path.exists(name):
        os.unlink(name)


def run(args, dtype, prompt, measure):
    """(rank, load seconds, the measure() result with what AutoTP replaced)."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM
    t0 = time.perf_counter()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    import deepspeed
    import deepspeed.comm as dsc
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    engine = deepspeed.init_inference(model, tensor_parallel={"tp_size": dist.get_world_size()},
                                      dtype=dtype, replace_with_kernel_inject=False)
    cdb = dsc.comm.cdb
    if getattr(cdb, "shm_comm_op", None) is None:
        raise RuntimeError("DeepSpeed built no ShareMemCommBuilder op: AutoTP's all-reduces "
                           "would run on gloo")
    model = engine.module
    dist.barrier()  # every rank has mapped every rank's segment: each one's name can go
    unlink_segment(dist.get_rank())
    replaced = sorted({type(m).__name__ for m in model.modules()
                       if type(m).__module__.startswith("deepspeed")})
    load_s = time.perf_counter() - t0
    with torch.inference_mode():
        result = measure(model, prompt, args, dist)
    result["deepspeed_layers"] = replaced
    rank = dist.get_rank()
    dist.destroy_process_group()
    return rank, load_s, result

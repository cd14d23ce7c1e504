"""scripts/bench_hf_tp.py's "autotp" configuration: the same Hugging Face Llama split by DeepSpeed
AutoTP on CPU, deepspeed.init_inference(model, tensor_parallel={"tp_size": W}, dtype=...) with
replace_with_kernel_inject=False (AutoTP: its LinearLayer / LinearAllreduce in place of the
attention's and MLP's nn.Linear, every all-reduce through deepspeed.comm.inference_all_reduce,
DeepSpeed's shared-memory op). Run as one of torchrun's workers; the driver sets DS_ACCELERATOR=cpu
and LOCAL_SIZE = W (DeepSpeed's op takes its shared-memory path only when LOCAL_SIZE is the world
size). The default group is gloo: whatever AutoTP does not route through inference_all_reduce
runs there.

The same split on the "fluxcpp" backend, DeepSpeed's op left out (every all-reduce a
torch.distributed call on the backend): "autotp_fluxcpp"; then its LinearLayer / LinearAllreduce
swapped for fluxcpp's column / row-parallel layers: "autotp_fused". Both compare fluxcpp with
AutoTP on the same model code, without transformers' DTensor tp_plan path around them."""
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


def split(args, dtype, backend):
    """The model split by AutoTP with the default group on `backend`: (model, what it replaced).
    backend "gloo": its all-reduces on DeepSpeed's shared-memory op (which must exist); any other:
    DeepSpeed's op left out, every all-reduce through torch.distributed on that backend (the call
    DeepSpeed makes when its op is missing)."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(args.threads)
    dist.init_process_group(backend)
    import deepspeed
    import deepspeed.comm as dsc
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    engine = deepspeed.init_inference(model, tensor_parallel={"tp_size": dist.get_world_size()},
                                      dtype=dtype, replace_with_kernel_inject=False)
    cdb = dsc.comm.cdb
    if backend == "gloo" and getattr(cdb, "shm_comm_op", None) is None:
        raise RuntimeError("DeepSpeed built no ShareMemCommBuilder op: AutoTP's all-reduces "
                           "would run on gloo")
    if backend != "gloo":
        cdb.shm_vector_kernel_level = 0  # inference_all_reduce -> torch.distributed.all_reduce
    model = engine.module
    dist.barrier()  # every rank has mapped every rank's segment: each one's name can go
    unlink_segment(dist.get_rank())
    replaced = sorted({type(m).__name__ for m in model.modules()
                       if type(m).__module__.startswith("deepspeed")})
    return model, replaced


def targets(model):
    """(name, style, weight, bias) of AutoTP's attention and MLP layers, for fluxcpp's layers:
    LinearLayer (this rank's output features) "colwise", LinearAllreduce (this rank's input
    features, all-reduced, the bias added after) "rowwise"; the LM head stays AutoTP's."""
    from deepspeed.module_inject.layers import LinearAllreduce, LinearLayer
    for name, mod in list(model.named_modules()):
        style = {LinearLayer: "colwise", LinearAllreduce: "rowwise"}.get(type(mod))
        if style and "lm_head" not in name:
            yield name, style, mod.weight, mod.bias


def run(args, dtype, prompt, measure, backend="gloo", fused=None):
    """(rank, load seconds, {config: the measure() result}): "autotp" on gloo + DeepSpeed's op;
    on the "fluxcpp" backend "autotp_fluxcpp" and, with fused(model, targets) given, then
    "autotp_fused" (the same processes, AutoTP's layers swapped for fluxcpp's)."""
    import torch.distributed as dist
    t0 = time.perf_counter()
    model, replaced = split(args, dtype, backend)
    load_s = time.perf_counter() - t0
    name = "autotp" if backend == "gloo" else "autotp_" + backend
    results = {}
    with torch.inference_mode():
        results[name] = measure(model, prompt, args, dist)
    results[name]["deepspeed_layers"] = replaced
    if fused is not None:
        results["autotp_fused"] = fused(model, targets(model))
    rank = dist.get_rank()
    dist.destroy_process_group()
    return rank, load_s, results

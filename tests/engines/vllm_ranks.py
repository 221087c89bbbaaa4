"""vLLM's own parameters of a model, rank by rank, on CPU: T processes in a real gloo group, each
building vLLM's model class and filling it with vLLM's own loader (its default loader from the
Hugging Face checkpoint, or `sharded_state` from an export), then saving the rank's state dict as
vLLM's `save_sharded_state` sees it (tensors sharing storage reduced to one) to OUT/rank-R.safetensors.

Run by the engines' PyPI interpreter (tests/engines/requirements.lock):
  python vllm_ranks.py --tp T MODEL:OUT:FORMAT[:ep|:eplb]... [--sync SYNC_JSON]
FORMAT is auto, sharded_state, shardload (the plugin, `--load-format shardload`, from the checkpoint)
or server=NAME (the plugin from the weight server NAME); `ep` turns on vLLM's expert parallelism
(ep = tp) for that job (the expert-parallel group vLLM makes spans the T ranks either way, so one group
serves both), `eplb` its expert load balancer too. The plugin's formats need the shardload package on
PYTHONPATH: vLLM finds it by its entry point, as it does every general plugin.

--sync {"port": P, "model": NEW, "out": DIR, "own": DIR, "rebalance": {"map": [[...]], "out": DIR,
"own": DIR}} goes on with the model of the last server=NAME job, as an RL trainer syncs a live engine:
rank 0 asks the weight server (port P) to update to the checkpoint NEW, then every rank refills its
parameters in place (shardload.vllm.sync_worker, which post-processes each layer again through vLLM's own
reload machinery) and saves them to "out"; with "own", the model of the last auto job (vLLM's own load of
the same checkpoint) is reloaded from NEW in place by vLLM's own reload_weights and saved to "own"; with
"own_at_new": true instead, the last auto job's model is vLLM's own load of NEW itself. The
unquantized layers' post-processing (CPU GEMM packing) is a no-op in both, as it never ran here. With
"rebalance", rank 0 posts the expert map, every rank refills again, and vLLM's own EPLB
(rearrange_expert_weights_inplace, over the gloo group) applies the same map to vLLM's own model.
Rank 0 prints the seconds each took.
"""
import argparse
import json
import os
import time
from types import SimpleNamespace

from rank_group import post, run_ranks, static_fp8_quant

# vLLM's CUDA wheel picks its CPU platform from this, read when vllm is first imported.
os.environ["VLLM_TARGET_DEVICE"] = "cpu"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# One thread per rank: the ranks run side by side on a 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# Multimodal classes whose checkpoints make-tiny writes as such, without their towers: their modalities'
# limit 0, which makes vLLM build no tower (interfaces.py: _mark_tower_model puts a StageMissingLayer without
# parameters in its place), so that neither its own load nor sharded_state looks for tower tensors.
TOWERLESS = {"KimiK25ForConditionalGeneration": {"vision_chunk": 0}}


def tower_limits(model):
    config = os.path.join(model, "config.json")
    if not os.path.isfile(config):  # a Hugging Face model id (check_engine's hub case): not one of these
        return {}
    with open(config) as f:
        architecture = (json.load(f).get("architectures") or [""])[0]
    limits = TOWERLESS.get(architecture)
    return {"limit_mm_per_prompt": limits} if limits else {}


def rank_main(rank, args, port, errors):
    try:
        import torch

        torch.set_num_threads(1)
        from safetensors.torch import save_file
        from vllm.config import (DeviceConfig, LoadConfig, ModelConfig, ParallelConfig, VllmConfig,
                                 set_current_vllm_config)
        from vllm.distributed import init_distributed_environment, initialize_model_parallel
        from vllm.model_executor.model_loader import get_model_loader
        from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader
        from vllm.utils.torch_utils import set_default_torch_dtype

        if any(fmt == "shardload" or fmt.startswith("server=") for _, _, fmt, _ in args.jobs):
            from vllm.plugins import load_general_plugins

            load_general_plugins()  # as each vLLM process does: shardload's entry point registers its format

        def configs(model, load_format, expert_parallel):
            model_config = ModelConfig(model=model, dtype=args.dtype, skip_tokenizer_init=True,
                                       enforce_eager=True, seed=0, **tower_limits(model))
            extra = {}
            if load_format.startswith("server="):
                load_format, extra = "shardload", {"weight_server": load_format[len("server="):]}
            load_config = LoadConfig(load_format=load_format, model_loader_extra_config=extra)
            parallel_config = ParallelConfig(tensor_parallel_size=args.tp,
                                             enable_expert_parallel=bool(expert_parallel))
            vllm_config = VllmConfig(model_config=model_config, load_config=load_config,
                                     parallel_config=parallel_config, device_config=DeviceConfig("cpu"))
            # vLLM's validation refuses EPLB on a CPU platform: turned on after it. What it changes while
            # loading runs on CPU (the static MoE input scale made the maximum over the EP group).
            vllm_config.parallel_config.enable_eplb = expert_parallel == "eplb"
            return model_config, load_config, vllm_config

        # The group is made once; each job then builds its model under its own config (the
        # interpreter and vLLM's imports, most of the time, are paid once for all of them). vLLM
        # makes the expert-parallel group only under an MoE model's config: one is taken if any.
        built = [configs(model, fmt, ep) for model, _, fmt, ep in args.jobs]
        first = next((c for _, _, c in built if c.model_config.is_moe), built[0][2])
        with set_current_vllm_config(first):
            init_distributed_environment(world_size=args.tp, rank=rank, local_rank=rank,
                                         distributed_init_method=f"tcp://127.0.0.1:{port}",
                                         backend="gloo")
            initialize_model_parallel(args.tp, 1)
        def save(model, out, names=None):
            state = model.state_dict()
            if names is not None:  # what the loaders left: not what post-processing added since
                state = {k: v for k, v in state.items() if k in names}
            if all(t.is_contiguous() for t in state.values()):
                state = ShardedStateLoader._filter_subtensors(state)
            else:  # post-processed (FP8 weights transposed): one name per tensor view, the smallest
                kept = {}
                for k in sorted(state):
                    t = state[k]
                    kept.setdefault((t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride())), k)
                state = {k: state[k] for k in kept.values()}
            os.makedirs(out, exist_ok=True)
            save_file({k: v.detach().contiguous() for k, v in state.items()},
                      os.path.join(out, f"rank-{rank}.safetensors"))

        if any(per_tensor_fp8(c) for c, _, _ in built):
            cpu_fp8_stand_ins()
        if any(c.quantization in ("fp8", "compressed-tensors", "deepseek_v4_fp8") and not per_tensor_fp8(c)
               for c, _, _ in built):
            # vLLM picks a block FP8 layer's CPU kernel (AMX, and an op its CUDA wheel lacks) when it
            # builds the layer; none runs here (no forward pass, and block FP8's post-processing is not
            # run): the kernel's checks are answered yes (DeepSeek-V4's FP8 config, deepseek_v4_fp8, too).
            from vllm.model_executor.kernels.linear.scaled_mm.cpu import CPUFp8BlockScaledMMKernel

            CPUFp8BlockScaledMMKernel.is_supported = classmethod(lambda cls, *a, **k: (True, None))
            CPUFp8BlockScaledMMKernel.can_implement = classmethod(lambda cls, *a, **k: (True, None))
        cpu_model_stand_ins(built)
        live = {}  # the models --sync goes on with: the server's, and vLLM's own load of NEW
        for (model_dir, out, load_format, _), (model_config, load_config, vllm_config) in zip(args.jobs, built):
            with set_current_vllm_config(vllm_config):
                # The loader's own steps without the post-processing (CPU GEMM packing, FP8
                # kernels), which needs vLLM's compiled CPU ops: the parameters as the weight
                # loaders leave them.
                loader = get_model_loader(load_config)
                with set_default_torch_dtype(model_config.dtype), torch.device("cpu"):
                    model = loader.create_model(vllm_config=vllm_config, model_config=model_config)
                    start = time.perf_counter()
                    loader.load_weights(model, model_config)
                    seconds = time.perf_counter() - start
                save(model, out)
                if per_tensor_fp8(model_config):
                    fp8_post_process(model)
                    save(model, out + "-post")
            if rank == 0:
                print(f"load {load_format} {os.path.basename(model_dir)}: load_weights took {seconds:.4f} s",
                      flush=True)
            if load_format.startswith("server="):
                live["server"] = (model, vllm_config, load_format[len("server="):], model_dir)
            elif load_format == "auto":
                live["own"] = (model, vllm_config)  # the last: --sync's job puts it beside the server's
        if args.sync:
            sync(rank, args.sync, live, save)
    except BaseException as e:  # the parent names the rank that failed
        import traceback

        errors.put(f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        raise


def kernels_on_this_device(oracle):
    """Makes ORACLE (a vLLM MoE oracle module) see each experts class it lists as supported on this device: a
    subclass that says yes, for this oracle only (another oracle asking the same class keeps its own answer,
    as gpt-oss's MXFP4 one must). A function of its own, so that each oracle's wrapper binds its own list."""
    import types

    classes = oracle.backend_to_kernel_cls

    def here(cls):
        return types.new_class(cls.__name__, (cls,), {},
                               lambda ns: ns.update(_supports_current_device=staticmethod(lambda: True)))

    oracle.backend_to_kernel_cls = lambda backend: [here(c) for c in classes(backend)]


def cpu_model_stand_ins(built):
    """What vLLM asks of the device while it builds a model, answered for CPU where nothing it picks runs
    here (no forward pass, no post-processing of these layers): gpt-oss's MXFP4 experts get the CPU kernel
    class (its check asks for AMX tiles)."""
    import torch

    quant_methods = {c.quantization for c, _, _ in built}
    if any(packed_int(c) for c, _, _ in built):
        # vLLM's CPU platform offers its integer MoE experts only with AMX (and int4 symmetric alone): its own
        # CUDA experts are named instead (Marlin, which takes per-channel scales too, then its emulation and
        # Triton ones), which changes nothing its loaders do (the buffers are N-first whichever it picks).
        from vllm.model_executor.layers.fused_moe.oracle import int_wna16

        int_wna16._get_priority_backends = lambda: [int_wna16.WNA16MoEBackend.MARLIN,
                                                    int_wna16.WNA16MoEBackend.EMULATION,
                                                    int_wna16.WNA16MoEBackend.TRITON]
        # Subclasses that say yes, for the integer oracle only: gpt-oss's MXFP4 oracle asks the same Marlin
        # class and must keep its own answer (its CPU layout differs).
        kernels_on_this_device(int_wna16)
        # Its dense CPU kernel takes int4 only: int8 (W8A16) layers get the same kernel class named.
        # So do layers whose size its CPU kernel refuses (GPTQ's fused q_a / kv_a of 168 outputs: "multiples of
        # 32"), a kernel-only limit.
        from vllm.model_executor.kernels.linear.mixed_precision.cpu import CPUWNA16LinearKernel
        from vllm.model_executor.layers.quantization import auto_awq, auto_gptq
        from vllm.model_executor.layers.quantization.compressed_tensors.schemes import compressed_tensors_wNa16

        def or_cpu(choose_kernel):
            """CHOOSE_KERNEL, or vLLM's CPU kernel class where it finds none (a function of its own, so that
            each wrapper binds its own: DeepSeek-V3.2's stand-in below has a `choose` of its own)."""

            def choose_or_cpu(config, *args, **kwargs):
                try:
                    return choose_kernel(config, *args, **kwargs)
                except ValueError:
                    return CPUWNA16LinearKernel

            return choose_or_cpu

        compressed_tensors_wNa16.choose_mp_linear_kernel = or_cpu(compressed_tensors_wNa16.choose_mp_linear_kernel)
        auto_gptq.choose_mp_linear_kernel = or_cpu(auto_gptq.choose_mp_linear_kernel)
        auto_awq.choose_mp_linear_kernel = or_cpu(auto_awq.choose_mp_linear_kernel)
    if any(int8_weights(c) for c, _, _ in built):
        # Its CPU int8 MoE experts ask for AMX tiles: named on this CPU (a subclass, for the int8 oracle only),
        # which changes nothing its loaders do.
        from vllm.model_executor.layers.fused_moe.oracle import int8 as int8_oracle

        kernels_on_this_device(int8_oracle)
    if any(nvfp4_weights(c) for c, _, _ in built):
        # Its CPU platform lists no NVFP4 linear kernel and no NVFP4 MoE experts: its own emulation linear
        # kernel is named for the CPU, and its MoE experts are named on this CPU (subclasses, for the NVFP4
        # oracle only), which changes nothing its loaders do.
        from vllm.model_executor.kernels import linear as linear_kernels
        from vllm.model_executor.kernels.linear.nvfp4.emulation import EmulationNvFp4LinearKernel
        from vllm.model_executor.layers.fused_moe.oracle import nvfp4 as nvfp4_oracle
        from vllm.platforms import PlatformEnum

        linear_kernels._POSSIBLE_NVFP4_KERNELS[PlatformEnum.CPU] = [EmulationNvFp4LinearKernel]
        kernels_on_this_device(nvfp4_oracle)
    if "gpt_oss_mxfp4" in quant_methods or "deepseek_v4_fp8" in quant_methods:
        from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUExpertsMxfp4

        CPUExpertsMxfp4._supports_current_device = staticmethod(lambda: True)
    if any(getattr(c.hf_config, "index_topk", None) for c, _, _ in built):
        # DeepSeek-V3.2's sparse attention (its indexer) has no CPU backend: a sparse MLA backend class is
        # named, which only sizes its KV cache; its workspace manager is made on the CPU device.
        from vllm.platforms.cpu import CpuPlatform
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        choose = CpuPlatform.get_attn_backend_cls.__func__

        def attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
            if attn_selector_config.use_sparse:
                return AttentionBackendEnum.FLASHMLA_SPARSE.get_path()
            return choose(cls, selected_backend, attn_selector_config, num_heads)

        CpuPlatform.get_attn_backend_cls = classmethod(attn_backend_cls)
        from vllm.v1.worker.workspace import init_workspace_manager

        init_workspace_manager(torch.device("cpu"))


def packed_int(model_config):
    """Packed integer weights: llm-compressor's (compressed-tensors pack-quantized: W4A16, W8A16) and GPTQ's
    (vLLM's auto_gptq, whose MoE method asks the same integer oracle)."""
    quant = getattr(model_config.hf_config, "quantization_config", None) or {}
    if model_config.quantization in ("auto_gptq", "awq", "auto_awq"):
        return True
    return model_config.quantization == "compressed-tensors" and quant.get("format") == "pack-quantized"


def int8_weights(model_config):
    """llm-compressor's W8A8 int8 (compressed-tensors int-quantized)."""
    quant = getattr(model_config.hf_config, "quantization_config", None) or {}
    return model_config.quantization == "compressed-tensors" and quant.get("format") == "int-quantized"


def nvfp4_weights(model_config):
    """llm-compressor's NVFP4 (compressed-tensors nvfp4-pack-quantized) or NVIDIA ModelOpt's (vLLM's
    modelopt_fp4 method, which asks the same NVFP4 linear kernel and MoE oracle)."""
    quant = getattr(model_config.hf_config, "quantization_config", None) or {}
    if model_config.quantization == "modelopt_fp4":
        return True
    return model_config.quantization == "compressed-tensors" and quant.get("format") == "nvfp4-pack-quantized"


def per_tensor_fp8(model_config):
    """An FP8 checkpoint whose scales vLLM's post-processing requantizes (static per-tensor): the harness
    runs that post-processing and saves its result too. Block FP8 is left as loaded (its CPU kernels need
    AMX; its post-processing changes no value)."""
    quant = getattr(model_config.hf_config, "quantization_config", None) or {}
    if packed_int(model_config):
        return False
    if model_config.quantization == "compressed-tensors":  # llm-compressor's: its weights' strategy
        return all(g["weights"]["strategy"] == "tensor" for g in quant["config_groups"].values())
    return model_config.quantization == "fp8" and not quant.get("weight_block_size")


def cpu_fp8_stand_ins():
    """What vLLM's FP8 post-processing calls that its CUDA wheel does not run on CPU, as its kernels
    compute it: the static FP8 quantization (float32 x * (1 / scale), clamped to +-448, rounded to
    nearest even), and the FP8 MoE kernel's set-up, reduced to replacing the parameters with the
    requantized ones (no kernel-specific shuffle: the CPU has no FP8 MoE kernel)."""
    import vllm._custom_ops as ops
    from vllm.model_executor.layers.quantization.fp8 import Fp8MoEMethod
    from vllm.model_executor.utils import replace_parameter

    def setup_kernel(self, layer, w13, w2, w13_scale, w2_scale, w13_input_scale, w2_input_scale):
        replace_parameter(layer, "w13_weight", w13)
        replace_parameter(layer, "w2_weight", w2)
        replace_parameter(layer, f"w13_{self.weight_scale_name}", w13_scale)
        replace_parameter(layer, f"w2_{self.weight_scale_name}", w2_scale)

    ops.scaled_fp8_quant = static_fp8_quant
    Fp8MoEMethod._setup_kernel = setup_kernel
    # compressed-tensors' FP8 MoE: the kernel's weight format kept as loaded, and no kernel made.
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_fp8 as ct_moe)

    ct_moe.convert_to_fp8_moe_kernel_format = lambda fp8_backend, layer, w13, w2, w13_scale, w2_scale, **_: (
        w13, w2, w13_scale, w2_scale)
    ct_moe.CompressedTensorsW8A8Fp8MoEMethod.get_fused_moe_quant_config = lambda self, layer: None


def fp8_post_process(model):
    """vLLM's own FP8 post-processing of every FP8 layer and attention KV-cache scale (what its
    loader runs after the weights), with cpu_fp8_stand_ins; the unquantized layers' CPU GEMM packing
    is left out, as everywhere in this harness."""
    for module in model.modules():
        if fp8_method(module):
            module.quant_method.process_weights_after_loading(module)


def fp8_method(module):
    """Whether MODULE's quantization method is one of vLLM's FP8 ones (quant_method fp8 or llm-compressor's
    compressed-tensors FP8), or its attention KV-cache scales."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsLinearMethod)
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_fp8 as ct_moe)
    from vllm.model_executor.layers.quantization.compressed_tensors.schemes import CompressedTensorsW8A8Fp8
    from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod, Fp8MoEMethod
    from vllm.model_executor.layers.quantization.kv_cache import BaseKVCacheMethod

    method = getattr(module, "quant_method", None)
    if isinstance(method, CompressedTensorsLinearMethod):
        return isinstance(getattr(module, "scheme", None), CompressedTensorsW8A8Fp8)
    return isinstance(method, (Fp8LinearMethod, Fp8MoEMethod, ct_moe.CompressedTensorsW8A8Fp8MoEMethod,
                               BaseKVCacheMethod))


def sync(rank, spec, live, save):
    """--sync: the weight server updated, then rebalanced; the plugin refills the live model in place
    after each, and vLLM's own model goes the same way by vLLM's own means (reload_weights from NEW,
    then its EPLB's rearrange_expert_weights_inplace)."""

    import torch
    import torch.distributed as dist

    import shardload.vllm
    from vllm.config import set_current_vllm_config
    from vllm.distributed.eplb.eplb_communicator import TorchDistGlooStagedEplbCommunicator
    from vllm.distributed.eplb.rebalance_execute import rearrange_expert_weights_inplace
    from vllm.distributed.parallel_state import get_ep_group
    from vllm.model_executor.model_loader.reload.inplace import reload_weights

    model, vllm_config, server, model_dir = live["server"]
    # "own": vLLM's own load of the first checkpoint, reloaded from NEW; "own_at_new": vLLM's own load of
    # NEW itself (an FP8 MoE model, which vLLM's own reload_weights cannot reload on CPU), for its EPLB.
    own, own_config = live["own"] if "own" in spec or spec.get("own_at_new") else (None, None)
    models = [model] + ([own] if own is not None else [])
    addresses = {(id(m), name): t.data_ptr() for m in models for name, t in m.state_dict().items()}
    # Both refills post-process every layer again (the plugin's through vLLM's own reload machinery, as
    # vLLM's reload_weights does): the unquantized layers' CPU GEMM packing, which needs vLLM's compiled
    # CPU ops, is a no-op here, as it never ran on either model; FP8 layers run with cpu_fp8_stand_ins.
    for module in [m for root in models for m in root.modules()]:
        method = getattr(module, "quant_method", None)
        if method is not None and not fp8_method(module):
            method.process_weights_after_loading = lambda layer: None

    def unmoved(m):
        """Every tensor the model held before is where it was. A refill post-processes MLA attention
        (W_UV, W_UK_T: new tensors derived from kv_b_proj), which the first load here did not: only
        the tensors held before are checked and saved."""
        moved = [n for n, t in m.state_dict().items() if t.data_ptr() != addresses.get((id(m), n), t.data_ptr())]
        assert not moved, f"parameters moved: {moved[:5]}"

    def refill(what, out):
        dist.barrier()  # every rank done with the last fill before the server changes (the plugin would
        # catch a rank left behind, and copy again: this test compares each step)
        if rank == 0:
            post(spec, *what)
        dist.barrier()  # every rank reads the server's new version
        # As vLLM's collective_rpc calls a function with each worker (the parts sync_worker reads).
        worker = SimpleNamespace(model_runner=SimpleNamespace(model=model), vllm_config=vllm_config)
        summary = shardload.vllm.sync_worker(worker, weight_server=server)
        unmoved(model)
        save(model, out, {n for (m, n) in addresses if m == id(model)})
        return summary

    summary = refill(("/update_weights_from_disk", {"model_path": spec["model"]}), spec["out"])
    if "own" not in spec:
        if rank == 0:
            print(f"update: the plugin refilled {summary['bytes']} bytes from the server in "
                  f"{summary['seconds']:.4f} s", flush=True)
        if own is None:
            return
    else:
        with set_current_vllm_config(own_config):
            start = time.perf_counter()
            reload_weights(own_config, own, None, spec["model"], True)
            own_seconds = time.perf_counter() - start
        unmoved(own)
        save(own, spec["own"], {n for (m, n) in addresses if m == id(own)})
        if rank == 0:
            print(f"update: the plugin refilled {summary['bytes']} bytes from the server in "
                  f"{summary['seconds']:.4f} s; vLLM's own reload_weights from the checkpoint took "
                  f"{own_seconds:.4f} s", flush=True)
    loaded_names = {n for (m, n) in addresses if m == id(own)}
    rebalance = spec.get("rebalance")
    if not rebalance:
        return
    summary = refill(("/rebalance", {"physical_to_logical_map": rebalance["map"]}), rebalance["out"])

    # vLLM's gloo communicator waits on the accelerator's stream for the device-to-host copies before
    # sending; on CPU the copies are done when issued and there is no stream (torch would look for CUDA).
    class _CpuStream:
        def synchronize(self):
            pass

    torch.accelerator.current_stream = lambda *a, **k: _CpuStream()
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    # What vLLM's EPLB moves: each layer's per-expert tensors (FP8: the weights and their scales; the
    # static input scales are one per layer).
    layers = [m for m in own.modules() if isinstance(m, RoutedExperts)]
    weights = [list(m.get_expert_weights()) for m in layers]
    old = torch.arange(len(rebalance["map"][0])).repeat(len(layers), 1)
    group = get_ep_group()
    with set_current_vllm_config(own_config):
        start = time.perf_counter()
        rearrange_expert_weights_inplace(old, torch.tensor(rebalance["map"]), weights,
                                         [torch.empty_like(w) for w in weights[0]], group.device_group,
                                         TorchDistGlooStagedEplbCommunicator(group.cpu_group))
        own_seconds = time.perf_counter() - start
    unmoved(own)
    save(own, rebalance["own"], loaded_names)
    if rank == 0:
        print(f"rebalance: the plugin refilled {summary['bytes']} bytes from the server in "
              f"{summary['seconds']:.4f} s; vLLM's own EPLB moved the experts in {own_seconds:.4f} s", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs", nargs="+", metavar="MODEL:OUT:FORMAT",
                        help="load MODEL with load format FORMAT (auto, sharded_state, shardload, server=NAME), "
                             "save to OUT")
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--sync", type=json.loads, default=None, help="see the module's text")
    args = parser.parse_args()
    jobs = []
    for job in args.jobs:
        fields = job.split(":")
        if len(fields) not in (3, 4) or fields[3:] not in ([], ["ep"], ["eplb"]):
            parser.error(f"not MODEL:OUT:FORMAT[:ep|:eplb] (no ':' in paths): {job}")
        jobs.append((fields[0], fields[1], fields[2], fields[3] if len(fields) == 4 else ""))
    args.jobs = jobs
    outs = [out for _, out, _, _ in args.jobs]
    if args.sync:
        outs += [args.sync[k] for k in ("out", "own") if k in args.sync]
        outs += [args.sync["rebalance"][k] for k in ("out", "own") if args.sync.get("rebalance")]
    for out in outs:
        os.makedirs(out, exist_ok=True)
    run_ranks("vllm_ranks", rank_main, args)


if __name__ == "__main__":
    main()

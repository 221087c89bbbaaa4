"""What `shardload.verify` needs to know of the layout contract (docs/layout.md): which group of
ranks splits each parameter (its scope: world, attention or replicated) and how each rank module maps to the
checkpoint tensors it was made from."""
import re

from .verify_math import VerifyError


class Layout:
    """Who splits what: the scope of each parameter group and each rank's place in it."""

    def __init__(self, layout, n_ranks):
        self.T, self.tm = layout.get("tp_size"), layout.get("moe_tp_size")
        if type(self.T) is not int or type(self.tm) is not int or self.tm < 1 or self.T % self.tm:
            raise VerifyError(f"tp_size {self.T} and moe_tp_size {self.tm} must be integers, the second "
                              f"dividing the first")
        if n_ranks != self.T:
            raise VerifyError(f"{n_ranks} ranks of tensors for tp_size {self.T}")
        dp = layout.get("dp_size", 1)
        if type(dp) is not int or dp < 1 or self.T % dp:
            raise VerifyError(f"dp_size {dp} does not divide tp_size {self.T}")
        self.A = self.T // dp
        self.scopes = layout.get("scopes") or {}
        self.no_split_shared = bool(layout.get("no_split_shared_experts"))
        self.row_bias = layout.get("row_bias", "full")
        self.maps = layout.get("physical_to_logical_map") or []
        if not isinstance(self.maps, list) or any(
                not isinstance(row, list) or any(type(p) is not int for p in row) for row in self.maps):
            raise VerifyError("physical_to_logical_map must be a list of lists of integers")
        if not isinstance(self.scopes, dict) or any(
                v not in ("world", "attention", "replicated") for v in self.scopes.values()):
            raise VerifyError(f"scopes must map groups to world, attention or replicated: {self.scopes}")
        self.quantization = layout.get("quantization", "none")
        # compressed-tensors: tensor, channel or block (only per-tensor scales are requantized).
        self.weight_strategy = layout.get("weight_strategy")

    def scope(self, group):
        if group == "replicated":
            return "replicated"
        if group in self.scopes:
            return self.scopes[group]
        if group == "shared_experts" and self.no_split_shared:
            return "replicated"
        return "world"

    def place(self, group, r):
        """(group id, size n, index k) of rank r in the ranks that split `group`."""
        scope = self.scope(group)
        if scope == "world":
            return 0, self.T, r
        if scope == "attention":
            return r // self.A, self.A, r % self.A
        if scope == "replicated":
            return r, 1, 0
        raise VerifyError(f"unknown scope {scope!r} of group {group}")


# Rank module (after "model.layers.{i}.") -> (kind, group, checkpoint parts).
def classify(mod):
    if mod == "self_attn.qkv_proj":
        return "qkv", "attention", ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]
    if mod == "self_attn.fused_qkv_a_proj":
        return "column", "replicated", ["self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"]
    if mod in ("self_attn.kv_a_proj_with_mqa", "self_attn.indexer.wq_b", "self_attn.indexer.wk",
               "self_attn.indexer.weights_proj"):
        return "column", "replicated", [mod]
    if mod in ("self_attn.q_proj", "self_attn.q_b_proj", "self_attn.kv_b_proj"):
        return "column", "attention", [mod]
    if mod in ("linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba"):
        # Qwen3-Next: rows grouped by key head, so a rank's contiguous rows are its key-head groups.
        return "column", "attention", [mod]
    if mod in ("self_attn.o_proj", "linear_attn.out_proj"):
        return "row", "attention", [mod]
    m = re.fullmatch(r"(mlp|mlp\.shared_experts?|feed_forward|feed_forward\.shared_expert)\.(gate_up_proj|down_proj)",
                     mod)
    if m:
        group = "dense_mlp" if m.group(1) in ("mlp", "feed_forward") else "shared_experts"
        if m.group(2) == "gate_up_proj":
            return "column", group, [m.group(1) + ".gate_proj", m.group(1) + ".up_proj"]
        return "row", group, [mod]
    return None

"""`python3 -m shardload.verify`: do the rank tensors compute the same function as the checkpoint?

For sampled decoder layers, a random input goes through every projection twice, in float64: once from the
rank tensors the way the ranks compute it, once from the unsharded checkpoint tensors (FP8 dequantized with its
scales). Column-parallel layers: each rank's output must equal its rows of the full output (the rank-order
concatenation within the splitting group, compared rank by rank so that a failure names the rank); fused
layers are split back into parts by the rank's part rows; GQA k/v rows come from the head the rank owns.
Row-parallel layers: the partial sums of a group's ranks, plus the bias once (or the divided biases summed),
must equal the full output. Routed experts: each slot against the logical expert the expert map gives it,
w13 per MoE-TP rank, w2 summed over the MoE-TP ranks of the EP rank. Embedding / lm_head rows, norms,
routers and score biases are compared as values, and so are the rank's rows of Qwen3-Next's conv1d (its share
of the q, k and v channels), A_log and dt_bias.

The error measure and the tolerances are in verify_math.py.
"""
import argparse
import re
import sys
from dataclasses import dataclass, field

import torch

from . import _shardload, packed_int, rank_source, verify_deepseek_v4
from .errors import Error
from .safetensors_io import Checkpoint, SafetensorsError
from .verify_layout import Layout, classify
from .verify_math import (EXACT_TOLERANCE, SLACK, UNIT_ROUNDOFF, VerifyError, compare, decode_mxfp4, dequant,
                          dtype_name, fp8_bound_sq, fp8_tolerance, narrowing)


@dataclass
class Check:
    module: str        # e.g. "layer 1 self_attn.qkv_proj"
    where: str         # rank / expert / group of the worst feature
    error: float       # relative error of the feature with the largest error / tolerance
    tolerance: float   # that feature's tolerance

    @property
    def ok(self):
        return self.error <= self.tolerance


@dataclass
class Report:
    checks: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # structural failures (missing / unverified tensors)
    layers: list = field(default_factory=list)

    @property
    def ok(self):
        return not self.problems and all(c.ok for c in self.checks)

    @property
    def failures(self):
        return [c for c in self.checks if not c.ok]

    def lines(self):
        out = [f"verified layers {self.layers}"]
        for c in self.checks:
            out.append(f"{'ok  ' if c.ok else 'FAIL'} {c.module:<46} max rel err {c.error:.3e} "
                       f"(tolerance {c.tolerance:.1e}) at {c.where}")
        out += [f"FAIL {p}" for p in self.problems]
        return out


# The multimodal classes name their text model's tensors under a prefix (and nest its config): Llama-4's
# goes before every name; Qwen3.5's stands in place of "model." (its lm_head and mtp.* keep their names).
_MULTIMODAL_PREFIX = {"Llama4ForConditionalGeneration": ("language_model.", ""),
                      "Qwen3_5ForConditionalGeneration": ("model.language_model.", "model."),
                      "Qwen3_5MoeForConditionalGeneration": ("model.language_model.", "model."),
                      "Gemma4ForConditionalGeneration": ("model.language_model.", "model."),
                      "KimiK25ForConditionalGeneration": ("language_model.", "")}
# Qwen3.5's linear-attention projections stored apart: in_proj_qkv's q, k and v row ranges are checked as
# parts of the rank's in_proj_qkvz, beside in_proj_z (and in_proj_b, in_proj_a of in_proj_ba).
_SEPARATE_PROJECTIONS = {"linear_attn.in_proj_qkvz": ["linear_attn.in_proj_q", "linear_attn.in_proj_k",
                                                      "linear_attn.in_proj_v", "linear_attn.in_proj_z"],
                         "linear_attn.in_proj_ba": ["linear_attn.in_proj_b", "linear_attn.in_proj_a"]}
_QKV_ROWS = re.compile(r"(.*\.linear_attn\.in_proj_)qkv\.(weight|weight_scale_inv|weight_scale|input_scale)")
# ... and packed (GPTQ qweight, compressed-tensors weight_packed): its part rows cut from the dequantized whole.
_QKV_PACKED = re.compile(r"(.*\.linear_attn\.in_proj_)qkv\.(qweight|weight_packed)")
_FUSED_EXPERTS = re.compile(r"(.*\.experts)\.(gate_up_proj|down_proj)(_blocks)?")
# gpt-oss: fused gate/up interleaved (gate j at 2j, up j at 2j + 1), with biases, and MXFP4 on the Hub.
_INTERLEAVED_GATE_UP = {"GptOssForCausalLM"}


class _Model:
    """The checkpoint side: float64 weights with FP8 dequantized (per-tensor or block scales), named as the
    engines read them: a multimodal checkpoint's text-model prefix dropped, Llama-4's fused [E, in, out] experts
    seen as per-expert [out, in] gate_proj / up_proj / down_proj, and its q/k heads in the engines' rotary order
    (each head's even rows, then its odd rows)."""

    def __init__(self, model_dir):
        self.ckpt = Checkpoint(model_dir)
        cfg = self.ckpt.config
        arch = (cfg.get("architectures") or [""])[0]
        self.prefix, self.replaced = _MULTIMODAL_PREFIX.get(arch, ("", ""))
        # DeepSeek-V4: DeepSeek's own names in the checkpoint (verify_deepseek_v4.py)
        self.v4 = verify_deepseek_v4.Names(self.ckpt) if arch == verify_deepseek_v4.ARCH else None
        if self.prefix:
            cfg = cfg.get("text_config") or {}
        self.rotary_pairs = arch.startswith("Llama4")
        self.interleaved = arch in _INTERLEAVED_GATE_UP
        # Gemma 4's and Qwen3.5-MoE's fused experts [E, out, in], the others' [E, in, out]
        self.fused_out_in = arch.startswith(("Gemma4", "Qwen3_5Moe"))
        self.heads = cfg.get("num_attention_heads")
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.head_dim = cfg.get("head_dim") or (cfg.get("hidden_size") or 0) // (self.heads or 1)
        # Qwen3-Next's linear attention: the conv1d channels are key_dim q, key_dim k, value_dim v.
        self.key_dim = (cfg.get("linear_num_key_heads") or 0) * (cfg.get("linear_key_head_dim") or 0)
        self.value_dim = (cfg.get("linear_num_value_heads") or 0) * (cfg.get("linear_value_head_dim") or 0)
        # compressed-tensors' packed integer weights: X.weight_packed seen as X.weight (dequantized, float64).
        self.packed = packed_int.Scheme.of(self.ckpt.config)
        self.layer_dims = {}  # layer -> (head_dim, KV heads) where they are not the config's (Gemma 4)
        self.aliases = {}  # a name another tensor stands for: Gemma 4's v_proj of a layer reusing K as V
        if arch.startswith("Gemma4"):
            self._gemma4_layers(cfg)
        self.virtual = {}  # per-expert name -> (fused tensor name, expert, part)
        self.row_ranges = {}  # in_proj_{q,k,v} name -> (in_proj_qkv name, first row, rows)
        for name in self.ckpt.where:
            m = _QKV_ROWS.fullmatch(name)
            if m and self.inner(name) is not None:
                # Weight rows of each part; a scale is cut to them in _get by its own shape.
                sizes = [self.key_dim, self.key_dim, self.value_dim]
                for part, begin, size in zip("qkv", (0, sizes[0], 2 * sizes[0]), sizes):
                    self.row_ranges[self.inner(m.group(1) + part + "." + m.group(2))] = (name, begin, size)
            m = _QKV_PACKED.fullmatch(name)
            if m and self.packed is not None and self.inner(name) is not None:
                whole = self.inner(m.group(1) + "qkv.weight")  # dequantized by _get, as the ranks' are
                for part, begin, size in zip("qkv", (0, self.key_dim, 2 * self.key_dim),
                                             (self.key_dim, self.key_dim, self.value_dim)):
                    self.row_ranges[self.inner(m.group(1) + part + ".weight")] = (whole, begin, size)
            m = _FUSED_EXPERTS.fullmatch(name)
            if not m or not name.startswith(self.prefix):
                continue
            base = self.inner(m.group(1))  # the multimodal classes' text model under the engines' names
            for x in range(self.ckpt.shape(name)[0]):
                parts = ("gate_proj", "up_proj") if m.group(2) == "gate_up_proj" else ("down_proj",)
                for part in parts:
                    self.virtual[f"{base}.{x}.{part}.weight"] = (name, x, part)
                    if self.prefix + m.group(1) + "." + m.group(2) + "_bias" in self.ckpt:
                        self.virtual[f"{base}.{x}.{part}.bias"] = (name, x, part + ".bias")

    def _gemma4_layers(self, cfg):
        """Gemma 4's full-attention layers: their head size and KV heads as transformers reads them (its saved
        per_layer_config, else the Hub's global_head_dim, default 512, and with attention_k_eq_v
        num_global_key_value_heads), and their k_proj standing for v_proj when K is reused as V; the layers past
        num_hidden_layers - num_kv_shared_layers have no K/V of their own."""
        n = cfg.get("num_hidden_layers") or 0
        types = list(cfg.get("layer_types") or
                     ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)])
        if types:
            types[-1] = "full_attention"
        k_eq_v = bool(cfg.get("attention_k_eq_v"))
        overrides = cfg.get("per_layer_config")
        first_shared = n - (cfg.get("num_kv_shared_layers") or 0)
        for i, kind in enumerate(types):
            if overrides is not None:
                o = overrides.get(str(i)) or {}
            elif kind == "full_attention":
                o = {"head_dim": cfg.get("global_head_dim") or 512}
                if k_eq_v:
                    o["num_key_value_heads"] = cfg.get("num_global_key_value_heads") or self.kv_heads
            else:
                o = {}
            self.layer_dims[i] = (o.get("head_dim") or self.head_dim, o.get("num_key_value_heads") or self.kv_heads)
            if k_eq_v and kind == "full_attention" and i < first_shared:
                self.aliases[f"model.layers.{i}.self_attn.v_proj.weight"] = f"model.layers.{i}.self_attn.k_proj.weight"

    def head_dim_at(self, layer):
        return self.layer_dims.get(layer, (self.head_dim, self.kv_heads))[0]

    def kv_heads_at(self, layer):
        return self.layer_dims.get(layer, (self.head_dim, self.kv_heads))[1]

    def outer(self, name):
        """A text-model name as the checkpoint spells it."""
        if self.v4:
            return self.v4.to_checkpoint(name)
        if not self.prefix or not name.startswith(self.replaced):
            return name
        return self.prefix + name[len(self.replaced):]

    def inner(self, name):
        """The text model's name of a checkpoint (or rank) tensor; None for another tower's."""
        if self.v4:
            return self.v4.to_engine(name)
        if not self.prefix:
            return name
        if name.startswith(self.prefix):
            return self.replaced + name[len(self.prefix):]
        return None if name.startswith(self.replaced) else name

    def names(self):
        names = [self.inner(n) for n in self.ckpt.where if self.inner(n) is not None] + list(self.virtual)
        return [n[:-len("_packed")] if n.endswith(".weight_packed") else
                n[:-len("qweight")] + "weight" if n.endswith(".qweight") else n for n in names]

    def _packed(self, name):
        """The checkpoint's X.weight_packed (GPTQ: X.qweight) behind rank name X.weight, or None."""
        if self.packed is None or not name.endswith(".weight"):
            return None
        if self.packed.modelopt:  # its FP4 bytes keep the name X.weight; X.weight_scale_2 marks them
            return self.outer(name) if self.outer(name) + "_scale_2" in self.ckpt else None
        if self.outer(name) in self.ckpt:
            return None
        packed = self.outer(name)[:-len("weight")] + self.packed.weight_suffix
        return packed if packed in self.ckpt else None

    def packed_shapes(self):
        """Every [N, K] the checkpoint's weight_shape tensors hold."""
        return {tuple(int(v) for v in self.ckpt.get(n).tolist()) for n in self.ckpt.where
                if n.endswith(".weight_shape")}

    def has(self, name):
        name = self.aliases.get(name, name)
        return (name in self.virtual or name in self.row_ranges or self.outer(name) in self.ckpt or
                self._packed(name) is not None)

    def shape(self, name):
        name = self.aliases.get(name, name)
        if name in self.virtual or name in self.row_ranges or self._packed(name):
            return list(self._get(name).shape)
        return self.ckpt.shape(self.outer(name))

    def dtype(self, name):
        name = self.aliases.get(name, name)
        if self._packed(name):
            return "F64"  # dequantized exactly, as the rank's are
        if (name in self.virtual and self.virtual[name][0].endswith("_blocks")) or (
                self.v4 and self.v4.is_mxfp4_expert(self.outer(name))):
            return "BF16"  # MXFP4 decodes exactly; the rank's codes are compared decoded too
        if name in self.row_ranges:
            source = self.row_ranges[name][0]
            return "F64" if self._packed(source) else self.ckpt.dtype(source)
        return self.ckpt.dtype(self.virtual[name][0] if name in self.virtual else self.outer(name))

    def _get(self, name):
        name = self.aliases.get(name, name)
        packed = self._packed(name)
        if packed:
            if self.packed.gptq or self.packed.awq:
                base = packed[:-len("qweight")]
                dequantize = packed_int.dequantize_awq if self.packed.awq else packed_int.dequantize_gptq
                return dequantize(self.ckpt.get(packed), self.ckpt.get(base + "scales"),
                                  self.ckpt.get(base + "qzeros"), self.packed)
            if self.packed.modelopt:
                return packed_int.dequantize_modelopt(self.ckpt.get(packed), self.ckpt.get(packed + "_scale"),
                                                      self.ckpt.get(packed + "_scale_2"))
            base = packed[:-len("packed")]
            if self.packed.nvfp4:
                return packed_int.dequantize_nvfp4(self.ckpt.get(packed), self.ckpt.get(base + "scale"),
                                                   self.ckpt.get(base + "global_scale"))
            zero = self.ckpt.get(base + "zero_point") if self.packed.zero_points else None
            return packed_int.dequantize(self.ckpt.get(packed), self.ckpt.get(base + "scale"), zero, self.packed)
        if name in self.row_ranges:
            source, begin, size = self.row_ranges[name]
            t = self._get(source) if self._packed(source) else self.ckpt.get(source)
            rows = 2 * self.key_dim + self.value_dim
            if t.numel() <= 1:  # a per-tensor scale: every part's
                return t
            if t.shape[0] != rows:  # a block grid: the part's block rows
                begin, size = begin // 128, -(-size // 128)
            return t[begin:begin + size]
        if name in self.virtual:
            fused, x, part = self.virtual[name]
            if part.endswith(".bias"):  # [E, 2I] (interleaved) or [E, H]
                b, part = self.ckpt.get(fused + "_bias" if not fused.endswith("_blocks") else
                                        fused[:-len("_blocks")] + "_bias")[x], part[:-len(".bias")]
                return b if part == "down_proj" else (b[0::2] if part == "gate_proj" else b[1::2])
            if fused.endswith("_blocks"):  # MXFP4, already [out, in]
                w = decode_mxfp4(self.ckpt.get(fused)[x], self.ckpt.get(fused[:-len("_blocks")] + "_scales")[x]).T
            else:
                w = self.ckpt.get(fused)[x]  # [in, out]
                if self.fused_out_in:
                    w = w.T
            if part != "down_proj":
                half = w.shape[1] // 2
                if self.interleaved:
                    w = w[:, 0::2] if part == "gate_proj" else w[:, 1::2]
                else:
                    w = w[:, :half] if part == "gate_proj" else w[:, half:]
            return w.T.contiguous()
        w = self.v4.get(self.outer(name)) if self.v4 else self.ckpt.get(self.outer(name))
        if self.rotary_pairs and re.search(r"self_attn\.[qk]_proj\.weight$", name):
            d = self.head_dim
            w = w.reshape(-1, d // 2, 2, w.shape[-1]).transpose(1, 2).reshape(-1, w.shape[-1])
        return w

    def value(self, name):
        return self._get(name).double()

    def weight(self, base):
        codes = self._get(base + ".weight")
        inv = self._get(base + ".weight_scale_inv") if self.has(base + ".weight_scale_inv") else None
        scale = self._get(base + ".weight_scale") if self.has(base + ".weight_scale") else None
        return dequant(codes, base + ".weight", [codes.shape[0]], scale, inv)[0]

    def bias(self, base):
        return self.value(base + ".bias") if self.has(base + ".bias") else None


_EXPERT_PARTS = {"mlp": (["gate_proj", "up_proj"], "down_proj"), "": (["gate_proj", "up_proj"], "down_proj"), "block_sparse_moe": (["w1", "w3"], "w2"),
                 "feed_forward": (["gate_proj", "up_proj"], "down_proj"), "ffn": (["w1", "w3"], "w2")}


class _Verifier:
    def __init__(self, model, ranks, layout, tolerance, seed, tokens):
        self.model, self.ranks, self.lay = model, ranks, layout
        self.tol_override = tolerance
        self.gen = torch.Generator().manual_seed(seed)
        self.tokens = tokens
        self.bases = {}  # input width -> its orthogonal input rows (_x)
        self.report = Report()
        self.used = [set() for _ in ranks]

    def _x(self, n_in):
        """Random input rows. With as many tokens as input features they are an orthogonal matrix, so that
        ||y[:, c] - y_ref[:, c]|| is exactly the norm of the weight row's difference (no sampling noise in the
        error measure); past `tokens` features, Gaussian rows (the ratio then has ~sqrt(1/tokens) noise)."""
        if n_in > self.tokens:
            return torch.randn(n_in, self.tokens, generator=self.gen, dtype=torch.float64).T.contiguous()
        # An orthogonal basis measures every weight of that width exactly, whichever it is: one per width
        # (the QR was most of a small model's verify time).
        if n_in not in self.bases:
            g = torch.randn(n_in, n_in, generator=self.gen, dtype=torch.float64)
            self.bases[n_in] = torch.linalg.qr(g)[0].T.contiguous()
        return self.bases[n_in]

    def _get(self, r, name):
        if name not in self.ranks[r]:
            raise VerifyError(f"rank {r} has no tensor {name}")
        self.used[r].add(name)
        return self.ranks[r][name]

    def _scales(self, r, base, sep="."):
        """(scale, scale_inv) of a rank weight, marking the scale tensors (and input scales) as seen."""
        found = {}
        for s in ("weight_scale", "weight_scale_inv", "input_scale"):
            if base + sep + s in self.ranks[r]:
                self.used[r].add(base + sep + s)
                found[s] = self.ranks[r][base + sep + s]
        return found.get("weight_scale"), found.get("weight_scale_inv")

    def _kind(self, rank_weight, ckpt_dtypes, n_parts):
        """How a rank weight may differ from the checkpoint's: "exact", "cast" or "fp8" (verify_math.py)."""
        rd = dtype_name(rank_weight)
        if rd == "F8_E4M3":
            if any(d != "F8_E4M3" for d in ckpt_dtypes):
                return "fp8"  # dynamic quantization
            requantized = self.lay.quantization == "fp8" or (
                self.lay.quantization == "compressed-tensors" and self.lay.weight_strategy == "tensor")
            return "fp8" if requantized and n_parts > 1 else "exact"  # static fused requant
        return "cast" if any(narrowing(rd, d) for d in ckpt_dtypes) else "exact"

    def _tol(self, kind, rank_weight, bound_sq=None, ref_sq=None):
        if self.tol_override is not None:
            return self.tol_override
        if kind == "exact":
            return EXACT_TOLERANCE
        if kind == "cast":
            return SLACK * UNIT_ROUNDOFF.get(dtype_name(rank_weight), 2.0 ** -4)
        return fp8_tolerance(bound_sq, ref_sq)

    def _add(self, module, results):
        """results: (where, error, tolerance); the module reports its worst feature."""
        where, err, tol = max(results, key=lambda t: (t[1] / t[2]) if t[2] > 0 else (0 if t[1] == 0 else 1e300))
        self.report.checks.append(Check(module, where, err, tol))

    # ---- column-parallel: each rank's output == its rows of the full output, part by part ----
    def column(self, label, prefix, mod, kind_name, group, parts):
        full = [self.model.weight(prefix + p) for p in parts]
        biases = [self.model.bias(prefix + p) for p in parts]
        ckpt_dtypes = {self.model.dtype(prefix + p + ".weight") for p in parts}
        x = self._x(full[0].shape[1])
        refs = [x @ w.T + (b if b is not None else 0) for w, b in zip(full, biases)]
        results = []
        for r in range(len(self.ranks)):
            _, n, k = self.lay.place(group, r)
            ranges = []
            for j, w in enumerate(full):
                kv_heads = self.model.kv_heads_at(_layer_of(prefix)) if kind_name == "qkv" and j > 0 else None
                ranges.append(_rank_rows(label, parts[j], w.shape[0], n, k, kv_heads))
            rows = [b - a for a, b in ranges]
            wt = self._get(r, prefix + mod + ".weight")
            if tuple(wt.shape) != (sum(rows), full[0].shape[1]):
                raise VerifyError(f"{label}: rank {r} weight shape {list(wt.shape)}, expected "
                                  f"{[sum(rows), full[0].shape[1]]}")
            kind = self._kind(wt, ckpt_dtypes, len(parts))
            w_rank, s_rank = dequant(wt, f"{label} rank {r}", rows, *self._scales(r, prefix + mod))
            y = x @ w_rank.T
            if prefix + mod + ".bias" in self.ranks[r]:
                y = y + self._get(r, prefix + mod + ".bias").double()
            row = 0
            for j, (a, b) in enumerate(ranges):
                ref_rows = full[j][a:b]
                tol = self._tol(kind, wt, *((fp8_bound_sq(ref_rows, s_rank[row:row + b - a]),
                                             ref_rows.pow(2).sum(1)) if kind == "fp8" else ()))
                err, t = compare(y[:, row:row + b - a], refs[j][:, a:b], tol)
                results.append((f"rank {r} part {parts[j].split('.')[-1]}", err, t))
                row += b - a
        self._add(label, results)

    # ---- row-parallel: the partial sums of a group's ranks, plus the bias once, == the full output ----
    def row(self, label, prefix, mod, group, src):
        w = self.model.weight(prefix + src)
        bias = self.model.bias(prefix + src)
        ckpt_dtypes = {self.model.dtype(prefix + src + ".weight")}
        x = self._x(w.shape[1])
        ref = x @ w.T + (bias if bias is not None else 0)
        groups = {}
        for r in range(len(self.ranks)):
            gid, n, k = self.lay.place(group, r)
            groups.setdefault(gid, []).append((k, n, r))
        results = []
        for _, members in sorted(groups.items()):
            total = torch.zeros_like(ref)
            bound_sq = torch.zeros(w.shape[0], dtype=torch.float64)
            kind, partial = "exact", []
            for k, n, r in sorted(members):
                if w.shape[1] % n:
                    raise VerifyError(f"{label}: {w.shape[1]} columns do not split over {n} ranks")
                c = w.shape[1] // n
                wt = self._get(r, prefix + mod + ".weight")
                if tuple(wt.shape) != (w.shape[0], c):
                    raise VerifyError(f"{label}: rank {r} weight shape {list(wt.shape)}, expected {[w.shape[0], c]}")
                kr = self._kind(wt, ckpt_dtypes, 1)
                kind = kr if kr != "exact" else kind
                w_rank, s_rank = dequant(wt, f"{label} rank {r}", [w.shape[0]], *self._scales(r, prefix + mod))
                xs = x[:, k * c:(k + 1) * c]
                part = xs @ w_rank.T
                if kr == "fp8":
                    bound_sq += fp8_bound_sq(w[:, k * c:(k + 1) * c], s_rank)
                partial.append((compare(part, xs @ w[:, k * c:(k + 1) * c].T, EXACT_TOLERANCE)[0], r))
                total += part
                if prefix + mod + ".bias" in self.ranks[r]:
                    b = self._get(r, prefix + mod + ".bias").double()
                    if self.lay.row_bias == "divided" or k == 0:
                        total += b  # full bias: added by the group's first rank only
            if self.lay.row_bias == "divided" and bias is not None and kind == "exact":
                kind = "cast"  # bias / n rounded to the bias dtype on every rank, then summed
                wt = self.ranks[members[0][2]][prefix + mod + ".bias"]
            tol = self._tol(kind, wt, bound_sq, w.pow(2).sum(1))
            err, t = compare(total, ref, tol)
            ranks = [r for _, _, r in sorted(members)]
            results.append((f"ranks {ranks} (largest partial error: rank {max(partial)[1]})", err, t))
        self._add(label, results)

    # ---- routed experts: every slot against the logical expert the expert map gives it ----
    def experts(self, i, prefix, moe_index):
        # The experts' module: "mlp." and the like, or none (Gemma 4's layer.experts).
        moe = next((m for m in _EXPERT_PARTS if f"{prefix}{m}{'.' if m else ''}experts.w13_weight" in self.ranks[0]),
                   "mlp")
        (gate, up), down = _EXPERT_PARTS[moe]
        base = f"{prefix}{moe}{'.' if moe else ''}experts"
        tm = self.lay.tm
        el = self.ranks[0][base + ".w13_weight"].shape[0]
        pattern = re.compile(re.escape(base) + rf"\.(\d+)\.{down}\.weight")
        n_logical = sum(1 for n in self.model.names() if pattern.fullmatch(n))
        if moe_index < len(self.lay.maps):
            pmap = self.lay.maps[moe_index]
        else:
            pmap = [p % n_logical for p in range(el * self.lay.T // tm)]
        ck = lambda l, p: f"{base}.{l}.{p}"
        ckpt_dtypes = {self.model.dtype(ck(0, gate) + ".weight")}
        w13_res, w2_res, bias_res, by_slot = [], [], [], {}
        x13 = None
        prepared = [self._expert_tensors(r, base) for r in range(len(self.ranks))]
        for r in range(len(self.ranks)):
            e, rm = r // tm, r % tm
            w13, w2, s13, _ = prepared[r]
            if w13.shape[0] != el or w2.shape[0] != el:
                raise VerifyError(f"layer {i} experts: rank {r} has {w13.shape[0]} / {w2.shape[0]} slots, "
                                  f"expected {el}")
            kind = self._kind(w13, ckpt_dtypes, 2)
            for j in range(el):
                p = e * el + j
                if p >= len(pmap) or not 0 <= pmap[p] < n_logical:
                    raise VerifyError(f"layer {i} experts: physical expert {p} has no logical expert in the map")
                logical = pmap[p]
                wg, wu = self.model.weight(ck(logical, gate)), self.model.weight(ck(logical, up))
                if wg.shape[0] % tm:
                    raise VerifyError(f"layer {i} experts: {wg.shape[0]} rows do not split over moe_tp {tm}")
                n = wg.shape[0] // tm
                if tuple(w13.shape[1:]) != (2 * n, wg.shape[1]):
                    raise VerifyError(f"layer {i} experts.w13: rank {r} shape {list(w13.shape)}")
                x13 = self._x(wg.shape[1]) if x13 is None else x13
                w_rank, s_rank = dequant(w13[j], f"layer {i} experts.w13 rank {r} slot {j}", [n, n],
                                         *(s[j] if s is not None else None for s in s13))
                y = x13 @ w_rank.T
                where = f"rank {r} slot {j} (expert {logical})"
                for h, (name, ref_w) in enumerate((("gate", wg), ("up", wu))):
                    ref_rows = ref_w[rm * n:(rm + 1) * n]
                    tol = self._tol(kind, w13, *((fp8_bound_sq(ref_rows, s_rank[h * n:(h + 1) * n]),
                                                  ref_rows.pow(2).sum(1)) if kind == "fp8" else ()))
                    err, t = compare(y[:, h * n:(h + 1) * n], x13 @ ref_rows.T, tol)
                    w13_res.append((f"{where} {name}", err, t))
                if base + ".w13_bias" in self.ranks[r]:  # gpt-oss: split with its rows, interleaved as they are
                    bt = self._get(r, base + ".w13_bias")
                    b, tol = bt[j].double(), self._tol(self._kind(bt, {self.model.dtype(ck(logical, gate) + ".bias")}, 1), bt)
                    for h, part in enumerate((gate, up)):
                        ref_b = self.model.value(ck(logical, part) + ".bias")[rm * n:(rm + 1) * n]
                        err, t = compare(b[h::2].reshape(1, -1), ref_b.reshape(1, -1), tol)
                        bias_res.append((f"{where} w13_bias {part}", err, t))
                by_slot.setdefault((e, j), []).append((rm, r, logical))
        for (e, j), members in sorted(by_slot.items()):
            logical = members[0][2]
            wd = self.model.weight(ck(logical, down))
            x2 = self._x(wd.shape[1])
            n = wd.shape[1] // tm
            total = torch.zeros(x2.shape[0], wd.shape[0], dtype=torch.float64)
            bound_sq = torch.zeros(wd.shape[0], dtype=torch.float64)
            kind = "exact"
            bias_sum = None
            for rm, r, _ in sorted(members):
                _, w2, _, s2 = prepared[r]
                if tuple(w2.shape[1:]) != (wd.shape[0], n):
                    raise VerifyError(f"layer {i} experts.w2: rank {r} shape {list(w2.shape)}")
                if base + ".w2_bias" in self.ranks[r]:  # gpt-oss: whole on the first MoE-TP rank, zero after
                    bt = self._get(r, base + ".w2_bias")
                    bias_tol = self._tol(self._kind(bt, {self.model.dtype(ck(logical, down) + ".bias")}, 1), bt)
                    bias_sum = bt[j].double() if bias_sum is None else bias_sum + bt[j].double()
                kind = self._kind(w2, ckpt_dtypes, 1)
                w_rank, s_rank = dequant(w2[j], f"layer {i} experts.w2 rank {r} slot {j}", [wd.shape[0]],
                                         *(s[j] if s is not None else None for s in s2))
                total += x2[:, rm * n:(rm + 1) * n] @ w_rank.T
                if kind == "fp8":
                    bound_sq += fp8_bound_sq(wd[:, rm * n:(rm + 1) * n], s_rank)
            tol = self._tol(kind, self.ranks[members[0][1]][base + ".w2_weight"], bound_sq, wd.pow(2).sum(1))
            err, t = compare(total, x2 @ wd.T, tol)
            ranks = [r for _, r, _ in sorted(members)]
            w2_res.append((f"ep rank {e} slot {j} (expert {logical}) ranks {ranks}", err, t))
            if bias_sum is not None:
                ref_b = self.model.value(ck(logical, down) + ".bias")
                err, t = compare(bias_sum.reshape(1, -1), ref_b.reshape(1, -1), bias_tol)
                bias_res.append((f"ep rank {e} slot {j} (expert {logical}) w2_bias summed over ranks {ranks}",
                                 err, t))
        self._add(f"layer {i} experts.w13", w13_res)
        self._add(f"layer {i} experts.w2", w2_res)
        if bias_res:
            self._add(f"layer {i} experts biases", bias_res)

    def _expert_tensors(self, r, base):
        """(w13, w2, w13 scales, w2 scales) of rank r as experts() reads them: gpt-oss's MXFP4 codes decoded
        (float64, no scales left), and its interleaved gate/up rows put back as gate rows then up rows."""
        w13, w2 = self._get(r, base + ".w13_weight"), self._get(r, base + ".w2_weight")
        mx13, mx2 = self.ranks[r].get(base + ".w13_weight_scale"), self.ranks[r].get(base + ".w2_weight_scale")
        if mx13 is not None and mx13.dtype == torch.uint8:  # MXFP4: E8M0 scales, not FP8's float32
            self._scales(r, base + ".w13", "_")
            self._scales(r, base + ".w2", "_")
            w13 = decode_mxfp4(w13.reshape(*w13.shape[:-1], -1, 16), mx13)
            w2 = decode_mxfp4(w2.reshape(*w2.shape[:-1], -1, 16), mx2)
            s13, s2 = (None, None), (None, None)
        else:
            s13, s2 = self._scales(r, base + ".w13", "_"), self._scales(r, base + ".w2", "_")
        if self.model.interleaved:
            w13 = torch.cat([w13[:, 0::2], w13[:, 1::2]], dim=1)
        return w13, w2, s13, s2

    # ---- values: replicated tensors equal, vocab tables row by row (padding rows zero) ----
    def value(self, label, rank_name, ckpt_name, group="replicated", vocab=False, split=None):
        """split: None (whole), "heads" (rank k of n takes its n-th of the rows), "kv_heads" (the same,
        or the slice of the kv head it replicates when the ranks outnumber the kv heads) or "conv" (its n-th
        of the q, of the k and of the v channels of Qwen3-Next's conv1d, in that order)."""
        ref = self.model.value(ckpt_name)
        if ckpt_name.endswith("moe_statics.e_score_correction_bias"):
            ref = ref.reshape(-1)  # ERNIE's [1, E] is squeezed
        if vocab:
            vp = (ref.shape[0] + 63) // 64 * 64
            ref = torch.cat([ref, torch.zeros(vp - ref.shape[0], *ref.shape[1:], dtype=ref.dtype)])
        results = []
        for r in range(len(self.ranks)):
            _, n, k = self.lay.place(group, r)
            t = self._get(r, rank_name)
            if split == "conv":
                m = self.model
                sections = ((0, m.key_dim), (m.key_dim, m.key_dim), (2 * m.key_dim, m.value_dim))
                if sum(size for _, size in sections) != ref.shape[0]:
                    raise VerifyError(f"{label}: {ref.shape[0]} channels, config.json implies "
                                      f"{2 * m.key_dim + m.value_dim}")
                ranges = [(start + a, start + b) for start, size in sections
                          for a, b in [_rank_rows(label, ckpt_name, size, n, k)]]
                want = torch.cat([ref[a:b] for a, b in ranges])
            elif split:
                a, b = _rank_rows(label, ckpt_name, ref.shape[0], n, k,
                                  self.model.kv_heads if split == "kv_heads" else None)
                want = ref[a:b]
            else:
                want = ref[k * ref.shape[0] // n:(k + 1) * ref.shape[0] // n] if vocab else ref
            if tuple(t.shape) != tuple(want.shape):
                raise VerifyError(f"{label}: rank {r} shape {list(t.shape)}, expected {list(want.shape)}")
            kind = self._kind(t, {self.model.dtype(ckpt_name)}, 1)
            # Features: each table row, or a 1-D tensor as a whole.
            got, want = t.double().reshape(t.shape[0] if vocab else 1, -1).T, want.reshape(t.shape[0] if vocab else 1, -1).T
            err, tol = compare(got, want, self._tol(kind, t))
            results.append((f"rank {r}", err, tol))
        self._add(label, results)


def _rank_rows(label, what, rows, n, k, kv_heads=None):
    """Rows [a, b) of `what` (`rows` of them) that rank k of the n splitting it holds: its n-th, or, for kv
    heads (kv_heads given) with at least as many ranks as heads, the head k // (n / Hkv) it replicates."""
    if kv_heads and n >= kv_heads:
        if n % kv_heads:
            raise VerifyError(f"{label}: {n} ranks not a multiple of {kv_heads} kv heads")
        d, h = rows // kv_heads, k // (n // kv_heads)
        return h * d, (h + 1) * d
    if rows % n:
        raise VerifyError(f"{label}: {rows} rows of {what} do not split over {n} ranks")
    return k * rows // n, (k + 1) * rows // n


def _layer_of(name):
    m = re.match(r"model\.layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def default_layers(ranks):
    """First layer, first MoE layer, last layer."""
    layers = sorted({_layer_of(n) for n in ranks[0] if _layer_of(n) is not None})
    moe = sorted({_layer_of(n) for n in ranks[0] if n.endswith("experts.w13_weight")})
    return sorted({layers[0], layers[-1], *moe[:1]}) if layers else []


def _value_source(model, prefix, mod):
    """Checkpoint tensor of a replicated rank tensor (norms, routers, score biases, gates)."""
    if mod == "mlp.gate.e_score_correction_bias" and not model.has(prefix + mod):
        return prefix + "mlp.moe_statics.e_score_correction_bias"
    return prefix + mod


def verify(model_dir, ranks, layout, layers=None, tolerance=None, seed=0, tokens=512):
    """Checks ranks ([{name: torch tensor}] in rank order, FP8 as uint8 codes) of `layout` (an export's
    shardload.json as a dict) against the checkpoint in model_dir; returns a Report (`ok`, `checks`,
    `failures`, `problems`, `lines()`). layers: decoder layer indices (default: first, first MoE, last);
    tolerance: one bound for every module instead of the per-dtype ones. model_dir may be a Hugging Face
    model id in the local cache, as wherever shardload takes a model."""
    model = _Model(_shardload.resolve_model_path(str(model_dir)))
    if model.prefix:  # rank tensors keep the checkpoint's text-model prefix (vLLM's names): checked without it
        ranks = [{model.inner(n) or n: t for n, t in rank.items()} for rank in ranks]
    if model.packed is not None:  # packed integer weights: dequantized (float64) under X.weight
        shapes = model.packed_shapes()
        try:
            ranks = [packed_int.dequantized(rank, model.packed, shapes) for rank in ranks]
        except ValueError as e:
            raise VerifyError(f"packed integer weights: {e}") from None
    if model.v4:
        ranks = [verify_deepseek_v4.rank_scales_as_float(rank) for rank in ranks]
    lay = Layout(layout, len(ranks))
    v = _Verifier(model, ranks, lay, tolerance, seed, tokens)
    layers = default_layers(ranks) if layers is None else sorted(set(layers))
    v.report.layers = layers
    moe_layers = sorted({_layer_of(n) for n in ranks[0] if n.endswith("experts.w13_weight")})
    present = {_layer_of(n) for n in ranks[0]}
    work = []  # (label, check): one failure to check a module is reported and the others still run
    for i in layers:
        if i not in present:
            v.report.problems.append(f"layer {i} is not in the rank tensors")
            continue
        prefix = f"model.layers.{i}."
        mods = sorted({_SUFFIX.sub("", n[len(prefix):]) for n in ranks[0] if n.startswith(prefix)})
        for mod in mods:
            work.append((f"layer {i} {mod}", _check_for(v, model, i, prefix, mod, moe_layers)))
    for name, group in (("model.embed_tokens.weight", "embedding"), ("lm_head.weight", "lm_head")):
        if name in ranks[0]:
            work.append((name, lambda name=name, group=group: v.value(name, name, name, group, vocab=True)))
    if "model.norm.weight" in ranks[0]:
        work.append(("model.norm.weight", lambda: v.value(*["model.norm.weight"] * 3)))
    for name in sorted(n for n in ranks[0] if n.startswith("model.hc_head_")):  # DeepSeek-V4's head mixer
        work.append((name, lambda name=name: v.value(name, name, name)))
    # Gemma 4's per-layer embeddings: a vocab-parallel table, its projection split by rows, a norm.
    if "model.embed_tokens_per_layer.weight" in ranks[0]:
        work.append(("model.embed_tokens_per_layer.weight", lambda: v.value(
            *["model.embed_tokens_per_layer.weight"] * 3, "embedding", vocab=True)))
    if "model.per_layer_model_projection.weight" in ranks[0]:
        work.append(("model.per_layer_model_projection", lambda: v.column(
            "model.per_layer_model_projection", "model.", "per_layer_model_projection", "column", "embedding",
            ["per_layer_model_projection"])))
    if "model.per_layer_projection_norm.weight" in ranks[0]:
        work.append(("model.per_layer_projection_norm.weight",
                     lambda: v.value(*["model.per_layer_projection_norm.weight"] * 3)))
    for label, run in work:
        if run is None:
            continue
        try:
            run()
        except (VerifyError, SafetensorsError, KeyError, IndexError, TypeError, ValueError) as e:
            # Malformed rank tensors or manifest: a named failure, never a traceback.
            v.report.problems.append(f"{label}: cannot be checked: {type(e).__name__}: {e}")
    for r, tensors in enumerate(ranks):
        for name in sorted(tensors):
            li = _layer_of(name)
            if (li in layers or li is None) and name not in v.used[r] and not name.endswith("input_scale"):
                v.report.problems.append(f"rank {r} tensor {name} was not verified (unknown to verify)")
    return v.report


_SUFFIX = re.compile(r"\.(weight|bias|weight_scale|weight_scale_inv|input_scale)$")
_VALUES = ("mlp.gate", "block_sparse_moe.gate", "ffn.gate", "ffn.gate.e_score_correction_bias", "mlp.router", "mlp.shared_expert_gate", "mlp.gate.e_score_correction_bias",
           "block_sparse_moe.e_score_correction_bias", "feed_forward.router", "router.proj", "per_layer_input_gate",
           "per_layer_projection")
# Replicated tensors named without .weight (Gemma 4's router scales and layer scalar).
_BARE_VALUES = ("router.scale", "router.per_expert_scale", "layer_scalar")


def _check_for(v, model, i, prefix, mod, moe_layers):
    """The check of one rank module of layer i, or None for tensors another check covers (expert w2 and
    scales): anything left unchecked shows up as an unverified tensor."""
    label = f"layer {i} {mod}"
    cls = verify_deepseek_v4.classify(mod) if model.v4 else classify(mod)
    if mod in _SEPARATE_PROJECTIONS and not model.has(prefix + mod + ".weight"):
        cls = ("column", "attention", _SEPARATE_PROJECTIONS[mod])
    if mod.endswith("experts.w13_weight"):
        return lambda: v.experts(i, prefix, moe_layers.index(i))
    if cls and cls[0] in ("qkv", "column"):
        return lambda: v.column(label, prefix, mod, cls[0], cls[1], cls[2])
    if cls:
        return lambda: v.row(label, prefix, mod, cls[1], cls[2][0])
    if mod in ("self_attn.q_norm", "self_attn.k_norm") and model.has(prefix + mod + ".weight") and \
            model.shape(prefix + mod + ".weight")[0] > model.head_dim_at(i):
        # MiniMax-M2's per-layer q/k norms (over the whole projection) are split with the heads.
        split = "heads" if mod == "self_attn.q_norm" else "kv_heads"
        return lambda: v.value(label, prefix + mod + ".weight", prefix + mod + ".weight", "attention", split=split)
    if mod in _BARE_VALUES or (model.v4 and verify_deepseek_v4.BARE_VALUES.fullmatch(mod)):
        return lambda: v.value(label, prefix + mod, prefix + mod)
    if mod in ("self_attn.sinks", "attn.attn_sink"):  # gpt-oss, DeepSeek-V4: a logit per query head, by head
        return lambda: v.value(label, prefix + mod, prefix + mod, "attention", split="heads")
    if mod in ("linear_attn.A_log", "linear_attn.dt_bias"):
        return lambda: v.value(label, prefix + mod, prefix + mod, "attention", split="heads")
    if mod == "linear_attn.conv1d":
        name = prefix + mod + ".weight"
        return lambda: v.value(label, name, name, "attention", split="conv")
    # Gemma 4's MoE layers number their extra norms (pre_feedforward_layernorm_2, post_feedforward_layernorm_1).
    if mod.endswith("norm") or re.search(r"layernorm_\d$", mod) or mod in _VALUES:
        name = mod if mod.endswith("correction_bias") else mod + ".weight"
        # A LayerNorm (DeepSeek-V3.2's indexer k_norm) has a bias beside its weight.
        # ... and gpt-oss's router a bias beside its weight.
        biased = mod.endswith("norm") or mod == "mlp.router"
        names = [name] + ([mod + ".bias"] if biased and model.has(prefix + mod + ".bias") else [])
        return lambda: [v.value(label + (" bias" if n.endswith(".bias") else ""), prefix + n,
                                 _value_source(model, prefix, n)) for n in names]
    return None


def _layout_kwargs(a):
    """The library's layout keywords for the command line's options."""
    out = {"tp": a.tp if a.tp is not None else 1, "ep": a.ep if a.ep is not None else 1}
    for flag, convert in (("dp", int), ("dp_style", str), ("redundant_experts", int), ("expert_map", str),
                          ("row_bias", str), ("moe_dense_tp_size", int), ("moe_a2a_backend", str), ("dtype", str),
                          ("quantization", str)):
        val = getattr(a, flag)
        if val is not None:
            out[flag] = convert(val)
    if a.no_split_shared_experts:
        out["split_shared_experts"] = False
    for flag in ("enable_dp_lm_head", "enable_expert_parallel"):
        if getattr(a, flag):
            out[flag] = True
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m shardload.verify", description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--tp", type=int)
    p.add_argument("--ep", type=int)
    p.add_argument("--export", help="check this export directory instead of exporting MODEL")
    p.add_argument("--layers", help="comma-separated decoder layer indices (default: first, first MoE, last)")
    p.add_argument("--tolerance", type=float, help="one relative-error bound for every module")
    p.add_argument("--seed", type=int, default=0)
    for flag in ("--dp", "--dp-style", "--redundant-experts", "--expert-map", "--row-bias", "--moe-dense-tp-size",
                 "--moe-a2a-backend", "--dtype", "--quantization"):
        p.add_argument(flag)
    for flag in ("--no-split-shared-experts", "--enable-dp-lm-head", "--enable-expert-parallel"):
        p.add_argument(flag, action="store_true")
    a = p.parse_args(argv)
    try:
        layers = [int(s) for s in a.layers.split(",")] if a.layers else None
    except ValueError:
        p.error("--layers takes comma-separated integers")
    try:
        if a.export:
            ranks, layout = rank_source.load_export(a.export)
            for flag, key in ((a.tp, "tp_size"), (a.ep, "ep_size")):
                if flag is not None and flag != layout[key]:
                    p.error(f"--{key[:2]} {flag} but the export has {key} {layout[key]}")
        else:
            ranks, layout = rank_source.load_with_library(a.model, _layout_kwargs(a))
        report = verify(a.model, ranks, layout, layers=layers, tolerance=a.tolerance, seed=a.seed)
    except (SafetensorsError, VerifyError, Error, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    if report.ok:
        print(f"verify: OK ({len(report.checks)} modules)")
        return 0
    bad = [f"{c.module} at {c.where} (rel err {c.error:.3e} > {c.tolerance:.1e})" for c in report.failures]
    print("verify: FAILED: " + "; ".join(bad + report.problems), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

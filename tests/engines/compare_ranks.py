"""Compares two directories of per-rank state dicts (rank-R.safetensors, as vllm_ranks.py and
sglang_ranks.py write them): the same names on every rank, each with the same dtype, shape and bytes.
Returns the differences, each named (rank, tensor, what differs)."""
import os

from safetensors import safe_open


def rank_files(directory):
    return sorted(f for f in os.listdir(directory) if f.startswith("rank-") and f.endswith(".safetensors"))


def differences(a_dir, b_dir):
    out = []
    a_files, b_files = rank_files(a_dir), rank_files(b_dir)
    if a_files != b_files:
        return [f"rank files differ: {a_files} vs {b_files}"]
    for name in a_files:
        with safe_open(os.path.join(a_dir, name), "pt") as a, safe_open(os.path.join(b_dir, name), "pt") as b:
            a_keys, b_keys = set(a.keys()), set(b.keys())
            out += [f"{name}: {k} only in {a_dir}" for k in sorted(a_keys - b_keys)]
            out += [f"{name}: {k} only in {b_dir}" for k in sorted(b_keys - a_keys)]
            for k in sorted(a_keys & b_keys):
                x, y = a.get_tensor(k), b.get_tensor(k)
                if x.dtype != y.dtype or x.shape != y.shape:
                    out.append(f"{name}: {k}: {x.dtype} {tuple(x.shape)} vs {y.dtype} {tuple(y.shape)}")
                elif x.contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes() != \
                        y.contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes():
                    out.append(f"{name}: {k}: bytes differ")
    return out


if __name__ == "__main__":
    import sys

    diffs = differences(sys.argv[1], sys.argv[2])
    print("\n".join(diffs) if diffs else "byte-equal")
    sys.exit(1 if diffs else 0)

"""Renames tensors of a checkpoint in place with the official safetensors: every file of DIR written again with
each name that matches PATTERN (a regular expression, re.sub) replaced by REPLACEMENT, the index's weight map
too; the bytes are kept. Arguments: DIR PATTERN REPLACEMENT [PATTERN REPLACEMENT ...]. Prints the names changed.
Run by a producers' environment (scripts/pypi-env.sh)."""
import json
import pathlib
import re
import sys

from safetensors import safe_open
from safetensors.torch import save_file

root, pairs = pathlib.Path(sys.argv[1]), list(zip(sys.argv[2::2], sys.argv[3::2]))


def renamed(name):
    for pattern, replacement in pairs:
        name = re.sub(pattern, replacement, name)
    return name


changed = 0
for path in sorted(root.glob("*.safetensors")):
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
        tensors = {renamed(name): f.get_tensor(name) for name in f.keys()}
        changed += sum(1 for name in f.keys() if renamed(name) != name)
    save_file(tensors, str(path), metadata=metadata)
index = root / "model.safetensors.index.json"
if index.exists():
    content = json.loads(index.read_text())
    content["weight_map"] = {renamed(name): file for name, file in content["weight_map"].items()}
    index.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
print(changed)

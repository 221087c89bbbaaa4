"""Opens every .safetensors file under the directories given with the official safetensors package
(safe_open, every tensor read): it must accept each. Prints the count."""
import pathlib
import sys

from safetensors import safe_open

count = 0
for root in sys.argv[1:]:
    for path in sorted(pathlib.Path(root).rglob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                f.get_tensor(name)
        count += 1
print(count)

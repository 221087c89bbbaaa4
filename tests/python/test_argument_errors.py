"""Arguments the library refuses instead of guessing: an empty update filter (which used to rewrite
every tensor, as if no filter had been given) and an export directory given where a checkpoint is
needed (which used to be reported as a checkpoint with several files and no index)."""
import pytest
import torch

import shardload
from conftest import run_shardload

# Filters of the wrong type or value: each a shardload.InvalidArgumentError naming the field (pybind's
# "Unable to cast" before), and a bool is not a layer number.
BAD_FILTERS = [{"substrings": "mlp"}, {"substrings": [1]}, 5, b"mlp", {"experts": [["1", 2]]},
               {"experts": [[2**70, 1]]}, {"experts": [[True, 2]]}, {"experts": [[1, -1]]}, {"experts": [[1]]},
               {"experts": [1, 2]}, {"regex": 3}, {3: ["mlp"]}, {"weights": ["mlp"]}, ["mlp", None], 1.5]

EMPTY_FILTERS = [[], "", [""], ["self_attn", ""], {}, {"experts": []}, {"regex": ""}, {"substrings": []},
                 {"substrings": [""]}, {"substrings": ["self_attn"], "regex": ""}]


def _bytes(live):
    return {(rank, name): torch.from_dlpack(t).view(torch.uint8).clone()
            for rank in range(live.rank_count) for name, t in live.tensors(rank).items()}


@pytest.mark.parametrize("empty", EMPTY_FILTERS, ids=repr)
def test_an_empty_filter_is_refused_and_changes_nothing(tiny, empty):
    a, b = tiny("qwen3_moe", seed=1), tiny("qwen3_moe", seed=2)
    live = shardload.LiveModel(a, tp=2, ep=2)
    before = _bytes(live)
    with pytest.raises(shardload.InvalidArgumentError, match="empty filter") as error:
        live.update_weights(b, filter=empty)
    assert error.value.field.startswith("filter")
    assert live.version == 0
    after = _bytes(live)
    assert all(torch.equal(before[key], after[key]) for key in before)
    # None is "everything", and a filter that selects is taken as it is.
    assert live.update_weights(b, filter="self_attn")["version"] == 1
    assert live.update_weights(b, filter=None)["version"] == 2


def test_an_export_is_not_taken_for_a_checkpoint(tiny, tmp_path):
    export = tmp_path / "export"
    run_shardload("export", tiny("qwen3_moe"), "--tp", "4", "--out", export)
    for call in (lambda: shardload.load(export), lambda: shardload.load(export, tp=4),
                 lambda: shardload.LiveModel(export, tp=4), lambda: shardload.Checkpoint(export),
                 lambda: shardload.plan(export, tp=4)):
        with pytest.raises(shardload.InvalidArgumentError, match="is a shardload export") as error:
            call()
        assert error.value.file == str(export)
        assert "load_export" in str(error.value) and "no model.safetensors.index.json" not in str(error.value)
    # What takes it still does.
    assert sorted(shardload.load_export(export)) == [0, 1, 2, 3]
    # An update from an export is refused the same way, and changes nothing.
    live = shardload.LiveModel(tiny("qwen3_moe"), tp=4)
    with pytest.raises(shardload.InvalidArgumentError, match="is a shardload export"):
        live.update_weights(export)
    assert live.version == 0


@pytest.mark.parametrize("bad", BAD_FILTERS, ids=repr)
def test_a_filter_of_the_wrong_type_is_refused_by_name(tiny, bad):
    a, b = tiny("qwen3_moe", seed=1), tiny("qwen3_moe", seed=2)
    live = shardload.LiveModel(a, tp=2, ep=2)
    before = _bytes(live)
    with pytest.raises(shardload.InvalidArgumentError, match="bad update filter") as error:
        live.update_weights(b, filter=bad)
    assert error.value.field.startswith("filter"), str(error.value)
    assert live.version == 0
    after = _bytes(live)
    assert all(torch.equal(before[key], after[key]) for key in before)

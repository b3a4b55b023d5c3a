"""Tests for agentrl.protocol.DataProto: construction, indexing, key ops, reshaping, disk."""

import logging

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from agentrl.protocol import DataProto, to_object_array


def make(n: int = 4, meta: dict | None = None) -> DataProto:
    """A batch whose row i holds i in every field, so results are easy to read back."""
    return DataProto.from_single_dict(
        {
            "ids": torch.arange(n),
            "mask": torch.arange(n * 3, dtype=torch.float32).reshape(n, 3),
            "uid": [f"u{i}" for i in range(n)],
            "kw": [{"row": i} for i in range(n)],
        },
        meta_info={"temperature": 1.0} if meta is None else meta,
    )


def rows(data: DataProto) -> list[int]:
    return data.batch["ids"].tolist()


def assert_object_1d(data: DataProto) -> None:
    for key, value in data.non_tensor_batch.items():
        assert isinstance(value, np.ndarray) and value.dtype == object, key
        assert value.shape == (len(data),), key


# ---------------------------------------------------------------- construction


def test_from_single_dict_splits_tensors_and_objects():
    data = make(3)
    assert len(data) == 3
    assert isinstance(data.batch, TensorDict)
    assert sorted(data.batch.keys()) == ["ids", "mask"]
    assert sorted(data.non_tensor_batch) == ["kw", "uid"]
    assert data.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u2"]
    assert data.meta_info == {"temperature": 1.0}
    assert_object_1d(data)


def test_list_of_lists_becomes_1d_object_array():
    data = DataProto.from_dict(non_tensors={"msgs": [[1, 2], [3, 4], [5, 6]]})
    arr = data.non_tensor_batch["msgs"]
    assert arr.shape == (3,) and arr.dtype == object
    assert arr[1] == [3, 4]
    assert data.batch is None and len(data) == 3


def test_list_of_dicts_and_2d_numpy_become_rows():
    data = DataProto.from_dict(
        non_tensors={"d": [{"a": 1}, {"b": [2]}], "grid": np.arange(6).reshape(2, 3)}
    )
    assert data.non_tensor_batch["d"][1] == {"b": [2]}
    assert data.non_tensor_batch["grid"].shape == (2,)
    assert data.non_tensor_batch["grid"][1].tolist() == [3, 4, 5]


def test_numpy_string_array_becomes_object_of_python_str():
    arr = to_object_array(np.array(["x", "y"]), key="s")
    assert arr.dtype == object and arr.tolist() == ["x", "y"]
    assert type(arr[0]) is str


def test_object_array_is_kept_without_copy():
    arr = to_object_array(["a", "b"])
    assert to_object_array(arr) is arr


def test_from_dict_tensor_sizes_disagree():
    with pytest.raises(ValueError, match=r"'a': 3.*'b': 2"):
        DataProto.from_dict(tensors={"a": torch.zeros(3), "b": torch.zeros(2)})


def test_from_dict_non_tensor_length_disagrees():
    with pytest.raises(ValueError, match=r"non_tensor_batch\['uid'\] has length 2 but batch has 3"):
        DataProto.from_dict(tensors={"a": torch.zeros(3)}, non_tensors={"uid": ["x", "y"]})


def test_non_tensors_disagree_among_themselves():
    with pytest.raises(ValueError, match=r"'b'\] has length 1 but non_tensor_batch\['a'\] has 2"):
        DataProto.from_dict(non_tensors={"a": [1, 2], "b": [1]})


def test_bad_non_tensor_types():
    with pytest.raises(TypeError, match="'t' is a torch.Tensor"):
        DataProto.from_dict(non_tensors={"t": torch.zeros(2)})
    with pytest.raises(TypeError, match="'s' must be a list"):
        DataProto.from_dict(non_tensors={"s": "abc"})
    with pytest.raises(ValueError, match="'a' is 0-d"):
        DataProto.from_dict(tensors={"a": torch.tensor(1.0)})


def test_empty_dataproto_has_length_zero():
    data = DataProto()
    assert len(data) == 0 and data.batch is None and data.meta_info == {}


def test_check_consistency_after_direct_mutation():
    data = make(3)
    data.non_tensor_batch["bad"] = np.empty(2, dtype=object)
    with pytest.raises(ValueError, match=r"'bad'\] has length 2 but batch has 3"):
        data.check_consistency()
    data.non_tensor_batch["bad"] = np.arange(3)
    with pytest.raises(TypeError, match=r"'bad'\] must be a numpy array of dtype=object"):
        data.check_consistency()
    data.non_tensor_batch["bad"] = np.empty((3, 2), dtype=object)
    with pytest.raises(ValueError, match=r"'bad'\] must be 1-D, got shape \(3, 2\)"):
        data.check_consistency()


def test_to_single_dict_round_trip():
    data = make(2)
    again = DataProto.from_single_dict(data.to_single_dict(), meta_info=data.meta_info)
    assert torch.equal(again.batch["mask"], data.batch["mask"])
    assert again.non_tensor_batch["kw"].tolist() == [{"row": 0}, {"row": 1}]


# ---------------------------------------------------------------- indexing


def test_int_index_returns_length_one_dataproto():
    data = make(4)
    item = data[2]
    assert isinstance(item, DataProto) and len(item) == 1
    assert rows(item) == [2] and item.non_tensor_batch["kw"].tolist() == [{"row": 2}]
    assert rows(data[-1]) == [3]
    assert rows(data[np.int64(1)]) == [1]


def test_int_index_out_of_range():
    with pytest.raises(IndexError, match="index 4 out of range for DataProto of length 4"):
        make(4)[4]


def test_slice_index():
    part = make(5)[1:4]
    assert rows(part) == [1, 2, 3]
    assert part.non_tensor_batch["uid"].tolist() == ["u1", "u2", "u3"]
    assert rows(make(5)[::2]) == [0, 2, 4]


def test_list_numpy_and_torch_int_indices():
    data = make(5)
    for index in ([3, 0, 3], np.array([3, 0, 3]), torch.tensor([3, 0, 3])):
        part = data[index]
        assert rows(part) == [3, 0, 3]
        assert part.non_tensor_batch["uid"].tolist() == ["u3", "u0", "u3"]
        assert_object_1d(part)
    assert rows(data[[-1]]) == [4]
    assert len(data[[]]) == 0


def test_int_array_out_of_range():
    with pytest.raises(IndexError, match=r"out of range for DataProto of length 3"):
        make(3)[np.array([0, 3])]


def test_bool_mask_numpy_and_torch():
    data = make(4)
    for mask in (np.array([True, False, True, False]), torch.tensor([True, False, True, False])):
        part = data[mask]
        assert rows(part) == [0, 2]
        assert part.non_tensor_batch["kw"].tolist() == [{"row": 0}, {"row": 2}]


def test_bool_mask_wrong_length():
    with pytest.raises(IndexError, match="bool mask has length 3 but DataProto has 4"):
        make(4)[np.array([True, False, True])]
    with pytest.raises(IndexError, match="bool mask has length 5"):
        make(4)[torch.ones(5, dtype=torch.bool)]


def test_bad_index_types():
    data = make(2)
    with pytest.raises(TypeError, match="bool"):
        data[True]
    with pytest.raises(TypeError, match="dtype float64"):
        data[np.array([0.0, 1.0])]
    with pytest.raises(TypeError, match="str"):
        data["ids"]
    with pytest.raises(IndexError, match="1-D"):
        data[np.zeros((1, 1), dtype=np.int64)]


def test_index_copies_meta_info():
    data = make(2)
    part = data[0]
    part.meta_info["new"] = 1
    assert "new" not in data.meta_info and part.meta_info["temperature"] == 1.0


def test_index_non_tensor_only():
    data = DataProto.from_dict(non_tensors={"x": ["a", "b", "c"]})
    assert data[[2, 0]].non_tensor_batch["x"].tolist() == ["c", "a"]
    assert data[[2, 0]].batch is None


# ---------------------------------------------------------------- select / pop / rename


def test_select_keys_and_all():
    data = make(3, meta={"a": 1, "b": 2})
    part = data.select(batch_keys=["ids"], non_tensor_batch_keys=["uid"], meta_info_keys=["b"])
    assert list(part.batch.keys()) == ["ids"]
    assert list(part.non_tensor_batch) == ["uid"] and part.meta_info == {"b": 2}
    full = data.select()
    assert sorted(full.batch.keys()) == ["ids", "mask"] and sorted(full.meta_info) == ["a", "b"]


def test_select_unknown_key():
    with pytest.raises(KeyError, match=r"batch keys \['nope'\] not found; available: \['ids'"):
        make(2).select(batch_keys=["nope"])
    with pytest.raises(KeyError, match=r"non_tensor_batch keys \['x'\]"):
        make(2).select(non_tensor_batch_keys=["x"])


def test_select_shares_unless_deepcopy():
    data = make(2)
    shared = data.select()
    shared.batch["added"] = torch.zeros(2)
    assert "added" not in data.batch.keys()  # noqa: SIM118 (TensorDict has no `in`)
    shared.batch["ids"][0] = 100
    shared.non_tensor_batch["kw"][1]["row"] = 50
    assert rows(data) == [100, 1] and data.non_tensor_batch["kw"][1] == {"row": 50}
    copied = data.select(deepcopy=True)
    copied.batch["ids"][0] = -1
    copied.non_tensor_batch["kw"][1]["row"] = -1
    assert rows(data) == [100, 1] and data.non_tensor_batch["kw"][1] == {"row": 50}


def test_pop_removes_and_returns():
    data = make(3, meta={"a": 1, "b": 2})
    popped = data.pop(batch_keys=["ids"], non_tensor_batch_keys=["kw"], meta_info_keys=["a"])
    assert rows(popped) == [0, 1, 2] and popped.non_tensor_batch["kw"][2] == {"row": 2}
    assert popped.meta_info == {"a": 1}
    assert list(data.batch.keys()) == ["mask"] and list(data.non_tensor_batch) == ["uid"]
    assert data.meta_info == {"b": 2} and len(data) == 3


def test_pop_only_non_tensors_gives_batch_none():
    data = make(2)
    popped = data.pop(batch_keys=None, non_tensor_batch_keys=["uid"])
    assert sorted(data.batch.keys()) == ["ids", "mask"]
    assert popped.batch is None and len(popped) == 2
    assert popped.non_tensor_batch["uid"].tolist() == ["u0", "u1"]


def test_pop_unknown_key_leaves_self_unchanged():
    data = make(2)
    with pytest.raises(KeyError, match=r"\['zz'\] not found; available: \['kw', 'uid'\]"):
        data.pop(batch_keys=["ids"], non_tensor_batch_keys=["zz"])
    assert sorted(data.batch.keys()) == ["ids", "mask"]


def test_rename_tensor_and_non_tensor():
    data = make(2)
    assert data.rename(["ids", "uid"], ["input_ids", "sample_id"]) is data
    assert sorted(data.batch.keys()) == ["input_ids", "mask"]
    assert data.non_tensor_batch["sample_id"].tolist() == ["u0", "u1"]
    assert data.rename("mask", "attention_mask").batch["attention_mask"].shape == (2, 3)


def test_rename_errors():
    data = make(2)
    with pytest.raises(ValueError, match="'mask' already exists"):
        data.rename("ids", "mask")
    with pytest.raises(KeyError, match=r"\['nope'\] not found"):
        data.rename("nope", "x")
    with pytest.raises(ValueError, match="as many new keys"):
        data.rename(["ids", "mask"], ["a"])


# ---------------------------------------------------------------- union


def test_pop_then_union_restores_everything():
    data = make(3, meta={"a": 1})
    gen = data.pop(batch_keys=["ids"], non_tensor_batch_keys=["kw"], meta_info_keys=["a"])
    assert data.union(gen) is data
    assert sorted(data.batch.keys()) == ["ids", "mask"] and rows(data) == [0, 1, 2]
    assert sorted(data.non_tensor_batch) == ["kw", "uid"] and data.meta_info == {"a": 1}


def test_union_same_key_equal_values_is_fine():
    data = make(2)
    data.union(make(2).select(batch_keys=["ids"], non_tensor_batch_keys=["kw"]))
    assert rows(data) == [0, 1]


def test_union_conflicts_name_the_key():
    other = make(2)
    other.batch["ids"] = torch.tensor([0, 9])
    with pytest.raises(ValueError, match="tensor 'ids' differs"):
        make(2).union(other)
    other = make(2).select(non_tensor_batch_keys=["kw"])
    other.non_tensor_batch["kw"] = to_object_array([{"row": 0}, {"row": 7}])
    with pytest.raises(ValueError, match="non-tensor 'kw' differs"):
        make(2).union(other)
    with pytest.raises(ValueError, match="meta_info 'temperature' differs"):
        make(2).union(make(2, meta={"temperature": 0.5}))


def test_union_conflict_leaves_self_unchanged():
    data = make(2)
    other = DataProto.from_dict(
        tensors={"new": torch.ones(2), "ids": torch.tensor([5, 5])}, meta_info={"x": 1}
    )
    with pytest.raises(ValueError, match="'ids'"):
        data.union(other)
    assert sorted(data.batch.keys()) == ["ids", "mask"] and "x" not in data.meta_info


def test_union_dtype_difference_is_a_conflict():
    other = DataProto.from_dict(tensors={"ids": torch.arange(2, dtype=torch.float32)})
    with pytest.raises(ValueError, match="'ids'"):
        make(2).union(other)


def test_union_length_mismatch():
    with pytest.raises(ValueError, match="length 2 with 3"):
        make(2).union(make(3))


def test_union_into_non_tensor_only_does_not_alias_other():
    data = DataProto.from_dict(non_tensors={"uid": ["a", "b"]})
    other = DataProto.from_dict(tensors={"x": torch.tensor([1, 2])})
    data.union(other)
    data.batch["y"] = torch.zeros(2)
    assert list(other.batch.keys()) == ["x"]
    assert data.batch["x"].tolist() == [1, 2] and data.non_tensor_batch["uid"].tolist() == [
        "a",
        "b",
    ]


# ---------------------------------------------------------------- repeat / concat / chunk / split


def test_repeat_interleave_exact_values():
    data = DataProto.from_single_dict(
        {"x": torch.tensor([1, 2]), "d": [{"k": 1}, {"k": 2}], "l": [[1], [2, 2]]},
        meta_info={"m": 3},
    )
    out = data.repeat(2, interleave=True)
    assert out.batch["x"].tolist() == [1, 1, 2, 2]
    assert out.non_tensor_batch["d"].tolist() == [{"k": 1}, {"k": 1}, {"k": 2}, {"k": 2}]
    assert out.non_tensor_batch["l"].tolist() == [[1], [1], [2, 2], [2, 2]]
    assert out.meta_info == {"m": 3}
    assert_object_1d(out)


def test_repeat_tiled_exact_values():
    data = DataProto.from_single_dict(
        {"x": torch.tensor([[1, 1], [2, 2]]), "d": [{"k": 1}, {"k": 2}]}
    )
    out = data.repeat(3, interleave=False)
    assert out.batch["x"][:, 0].tolist() == [1, 2, 1, 2, 1, 2]
    assert out.batch["x"].shape == (6, 2)
    assert [d["k"] for d in out.non_tensor_batch["d"]] == [1, 2, 1, 2, 1, 2]
    assert_object_1d(out)


def test_repeat_non_tensor_only_and_bad_times():
    data = DataProto.from_dict(non_tensors={"s": ["a", "b"]})
    assert data.repeat(2).non_tensor_batch["s"].tolist() == ["a", "a", "b", "b"]
    with pytest.raises(ValueError, match="positive int, got 0"):
        data.repeat(0)


def test_concat_values_and_first_meta_info():
    out = DataProto.concat([make(2, meta={"a": 1}), make(3, meta={"a": 2})])
    assert rows(out) == [0, 1, 0, 1, 2]
    assert out.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u0", "u1", "u2"]
    assert out.meta_info == {"a": 1}
    assert_object_1d(out)


def test_concat_key_mismatch_names_keys():
    other = make(2)
    other.pop(batch_keys=["mask"])
    with pytest.raises(ValueError, match=r"tensor keys of part 1 differ.*missing \['mask'\]"):
        DataProto.concat([make(2), other])
    other = make(2)
    other.non_tensor_batch["extra"] = to_object_array([1, 2])
    with pytest.raises(ValueError, match=r"non-tensor keys of part 1.*extra \['extra'\]"):
        DataProto.concat([make(2), other])
    with pytest.raises(ValueError, match="at least one"):
        DataProto.concat([])


def test_chunk_even_and_error():
    parts = make(6).chunk(3)
    assert [rows(p) for p in parts] == [[0, 1], [2, 3], [4, 5]]
    assert parts[2].non_tensor_batch["uid"].tolist() == ["u4", "u5"]
    with pytest.raises(ValueError, match="length 5 cannot be split into 2 equal chunks"):
        make(5).chunk(2)


def test_split_last_part_smaller():
    parts = make(5).split(2)
    assert [rows(p) for p in parts] == [[0, 1], [2, 3], [4]]
    assert DataProto.concat(parts).non_tensor_batch["kw"].tolist() == [{"row": i} for i in range(5)]
    with pytest.raises(ValueError, match="split_size"):
        make(5).split(0)


# ---------------------------------------------------------------- device / disk / printing


def test_to_device_returns_self():
    data = make(2)
    assert data.to("cpu") is data
    assert data.batch["ids"].device.type == "cpu"


def test_save_load_round_trip(tmp_path):
    data = make(3, meta={"step": 7, "cfg": {"n": 2}})
    data.non_tensor_batch["nested"] = to_object_array([{"a": [1, {"b": 2}]}, [], None])
    path = tmp_path / "batch.pt"
    data.save_to_disk(path)
    back = DataProto.load_from_disk(path)
    assert len(back) == 3 and back.meta_info == {"step": 7, "cfg": {"n": 2}}
    assert torch.equal(back.batch["mask"], data.batch["mask"])
    assert back.batch["mask"].dtype == torch.float32
    assert back.non_tensor_batch["nested"].tolist() == [{"a": [1, {"b": 2}]}, [], None]
    assert back.non_tensor_batch["kw"].tolist() == [{"row": 0}, {"row": 1}, {"row": 2}]
    assert_object_1d(back)


def test_save_load_non_tensor_only(tmp_path):
    data = DataProto.from_dict(non_tensors={"s": ["a", "b"]})
    data.save_to_disk(tmp_path / "x.pt")
    back = DataProto.load_from_disk(tmp_path / "x.pt")
    assert back.batch is None and back.non_tensor_batch["s"].tolist() == ["a", "b"]


def test_repr_and_print_size(caplog):
    data = make(2)
    text = repr(data)
    assert "len=2" in text and "mask: (2, 3) float32" in text and "uid: object[2]" in text
    assert repr(DataProto.from_dict(non_tensors={"s": ["a"]})).startswith(
        "DataProto(len=1, batch=None, non_tensor_batch={s: object[1]}"
    )
    with caplog.at_level(logging.INFO, logger="agentrl.protocol"):
        data.print_size(prefix="gen: ")
    assert "gen: len=2, tensors 0.000 MiB" in caplog.text


# ---------------------------------------------------------------- property: ops agree with lists


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 6),
    times=st.integers(1, 3),
    interleave=st.booleans(),
    data=st.data(),
)
def test_ops_match_python_list_model(n, times, interleave, data):
    proto = make(n)
    model = list(range(n))
    index = data.draw(st.lists(st.integers(-n, n - 1), max_size=8))
    picked = proto[index]
    assert rows(picked) == [model[i] for i in index]
    assert [d["row"] for d in picked.non_tensor_batch["kw"]] == [model[i] for i in index]
    rep = proto.repeat(times, interleave=interleave)
    expected = [x for x in model for _ in range(times)] if interleave else model * times
    assert rows(rep) == expected
    assert [d["row"] for d in rep.non_tensor_batch["kw"]] == expected
    assert_object_1d(picked)
    assert_object_1d(rep)

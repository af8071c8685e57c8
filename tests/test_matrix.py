"""The all-pairs measure matrix file (relict.matrix): layout, round trip, refusals."""

import numpy as np
import pytest

from synthaudit.relict import matrix
from synthaudit.relict.matrix import MeasureMatrix

SYN, TRAIN = ["s1", "s2"], ["t1", "t2", "t3"]


def test_round_trip_keeps_keys_values_and_string_ids(tmp_path):
    values = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    path = tmp_path / "mae.npz"
    MeasureMatrix(values, "mae", SYN, TRAIN, 2.5, extras={"data_range": 1.0}).save(path)
    with np.load(path) as raw:  # the layout every reader relies on
        # no compute time in the file: a matrix is the same bytes on every run (dvc status); the time is
        # the job's benchmark file
        assert sorted(raw.files) == sorted(["values", "distances", "measure", "synthetic_ids", "training_ids",
                                            "data_range"])
        assert str(raw["measure"]) == "mae" and raw["synthetic_ids"].dtype.kind == "U"
    m = matrix.load(path, SYN, TRAIN)
    np.testing.assert_array_equal(m.values, values)
    np.testing.assert_array_equal(m.distances, values)  # a distance stays as it is
    assert m.measure == "mae" and m.seconds == 0.0 and float(m.extras["data_range"]) == 1.0
    first = path.read_bytes()
    MeasureMatrix(values, "mae", SYN, TRAIN, 7.5, extras={"data_range": 1.0}).save(path)
    assert path.read_bytes() == first  # another compute time, the same bytes
    assert m.synthetic_ids == SYN and m.training_ids == TRAIN and all(type(i) is str for i in m.training_ids)
    assert m.shape == (2, 3) and m.path == str(path)
    assert not list(tmp_path.glob(".tmp-*"))  # written atomically, nothing left behind


def test_distances_of_a_similarity_come_from_the_registry():
    s = np.array([[1.0, 0.0, -1.0], [0.5, -0.5, 0.25]])
    m = MeasureMatrix(s, "ssim", SYN, TRAIN, 0.0)
    np.testing.assert_allclose(m.distances, 1 - (s + 1) / 2)
    assert m.distances[0].tolist() == [0.0, 0.5, 1.0]
    # given explicitly (aligned matrices store their values as distances): kept
    aligned = MeasureMatrix(s, "mae_aligned", SYN, TRAIN, 0.0, distances=s)
    assert aligned.distances is s


def test_stale_ids_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "rmse.npz"
    MeasureMatrix(np.zeros((2, 3)), "rmse", SYN, TRAIN, 1.0).save(path)
    with pytest.raises(ValueError, match=r"rmse.npz: its training ids differ from the dataset's plan "
                                         r"\(position 2: 't3', expected 't4'\).*relict_gather"):
        matrix.load(path, training_ids=["t1", "t2", "t4"], expected="the dataset's plan")
    with pytest.raises(ValueError, match=r"rmse.npz: its synthetic ids differ .*\(2 ids, expected 3\)"):
        matrix.load(path, synthetic_ids=SYN + ["s3"])
    assert matrix.load(path, SYN).shape == (2, 3)  # the other side unchecked when not given


def test_shape_and_missing_keys_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"values has shape \(3, 2\), but there are 2 synthetic x 3 training"):
        MeasureMatrix(np.zeros((3, 2)), "mae", SYN, TRAIN, 0.0)
    with pytest.raises(ValueError, match="overwrite"):
        MeasureMatrix(np.zeros((2, 3)), "mae", SYN, TRAIN, 0.0, extras={"seconds": 1.0})
    bad = tmp_path / "bad.npz"
    np.savez(bad, values=np.zeros((2, 2)), distances=np.zeros((2, 2)), measure="mae",
             synthetic_ids=np.array(SYN), training_ids=np.array(TRAIN), seconds=0.0)
    with pytest.raises(ValueError, match=r"bad.npz: mae: values has shape \(2, 2\)"):
        matrix.load(bad)
    old = tmp_path / "old.npz"
    np.savez(old, values=np.zeros((2, 3)), synthetic_ids=np.array(SYN), training_ids=np.array(TRAIN))
    with pytest.raises(ValueError, match=r"old.npz: not a measure matrix, missing key\(s\) \['distances', 'measure'"):
        matrix.load(old)

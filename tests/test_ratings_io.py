"""Ratings tables and the I/O guarantees (clear errors, atomic writes, strict JSON)."""

import json

import numpy as np
import pytest

from synthaudit.io import VolumeError, atomic_path, load_volume, write_json
from synthaudit.ratings import RatingsError, consensus, read_ratings


def _ratings(tmp_path, body):
    p = tmp_path / "r.tsv"
    p.write_text("synthetic_id\trater\tscore\n" + body)
    return p


def test_read_ratings_and_consensus(tmp_path):
    p = _ratings(tmp_path, "s1\tA\t4\ns1\tB\t3\ns2\tA\t2\ns2\tB\t3\ns3\tA\t1\n")
    scores = read_ratings(p, ["s1", "s2", "s3"])
    assert scores == {"s1": [4, 3], "s2": [2, 3], "s3": [1]}
    c = consensus(scores, 3)
    assert c["s1"]["replica"] and c["s1"]["score"] == 3.5 and not c["s1"]["disagree"]
    assert not c["s2"]["replica"] and c["s2"]["disagree"]
    assert not c["s3"]["replica"]


def test_consensus_flags_volumes_for_re_rating_as_relict_did():
    """RELICT 2.5: raters who disagreed on the replica decision re-evaluated the pair; a spread of two
    or more points is flagged too. The mean still decides until new scores arrive."""
    from synthaudit.ratings import rating_rule, rerating_list

    c = consensus({"a": [2, 3], "b": [1, 2], "c": [3, 4], "d": [1, 3], "e": [4]}, 3)
    assert [c[k]["rerate"] for k in "abcde"] == [True, False, False, True, False]
    assert c["d"]["spread"] == 2 and not c["d"]["replica"] and c["d"]["disagree"]
    assert rerating_list(c) == ["a", "d"]
    rule = rating_rule(3)
    assert "mean over its raters" in rule and ">= 3" in rule and "re-rating" in rule and "round" in rule


def test_a_second_round_replaces_the_first_for_that_rater(tmp_path):
    p = tmp_path / "r.tsv"
    p.write_text("synthetic_id\trater\tscore\tround\n"
                 "s1\tA\t2\t1\ns1\tB\t3\t1\ns1\tA\t3\t2\ns2\tA\t1\t\ns2\tB\t1\t1\n")
    scores = read_ratings(p, ["s1", "s2"])
    assert sorted(scores["s1"]) == [3, 3] and scores["s2"] == [1, 1]
    c = consensus(scores, 3)
    assert c["s1"]["replica"] and not c["s1"]["rerate"]
    from synthaudit.ratings import read_ratings_by_rater

    assert read_ratings_by_rater(p, ["s1", "s2"]) == {"A": {"s1": 3, "s2": 1}, "B": {"s1": 3, "s2": 1}}
    p.write_text("synthetic_id\trater\tscore\tround\ns1\tA\t2\t2\ns1\tA\t3\t2\n")
    with pytest.raises(RatingsError, match="rated 's1' twice in round 2"):
        read_ratings(p, ["s1"])
    p.write_text("synthetic_id\trater\tscore\tround\ns1\tA\t2\tzero\n")
    with pytest.raises(RatingsError, match="round 'zero' is not an integer"):
        read_ratings(p, ["s1"])


@pytest.mark.parametrize("body, message", [
    ("zz\tA\t3\n", "r.tsv:2: unknown synthetic id 'zz'"),
    ("s1\tA\t5\n", "r.tsv:2: score 5 is outside the Likert scale 1-4"),
    ("s1\tA\tyes\n", "r.tsv:2: score 'yes' is not an integer"),
    ("s1\tA\t3\ns1\tA\t4\n", "r.tsv:3: rater 'A' rated 's1' twice"),
])
def test_bad_ratings_are_refused(tmp_path, body, message):
    with pytest.raises(RatingsError, match=message):
        read_ratings(_ratings(tmp_path, body), ["s1"])


def test_load_volume_refuses_nan_and_garbage(tmp_path, nifti):
    data = np.zeros((3, 3, 3), np.float32)
    data[1, 1, 1] = np.nan
    p = nifti("nan.nii.gz", data)
    with pytest.raises(VolumeError, match=r"nan.nii.gz: contains 1 NaN"):
        load_volume(p)
    junk = tmp_path / "junk.nii.gz"
    junk.write_bytes(b"not a nifti file")
    with pytest.raises(VolumeError, match="junk.nii.gz: unreadable volume"):
        load_volume(junk)
    (tmp_path / "empty.nii.gz").write_bytes(b"")  # an interrupted copy: said as such, not as a format error
    with pytest.raises(VolumeError, match=r"empty.nii.gz: empty file \(0 bytes\)$"):
        load_volume(tmp_path / "empty.nii.gz")
    with pytest.raises(VolumeError, match="file not found"):
        load_volume(tmp_path / "nothing.nii.gz")


def test_load_volume_reads_gzipped_nifti_as_nibabel_does(tmp_path):
    """load_volume's one-call gunzip (io._gzipped_nifti) against nib.load: NIfTI-1 and -2, scaled integers, a
    multi-member file with zero padding (bgzip, concatenated members); a truncated file and a gzipped
    non-NIfTI are refused with the file's name."""
    import gzip

    import nibabel as nib

    x = np.random.default_rng(0).normal(size=(7, 8, 9)).astype(np.float32)
    affine = np.diag([1.5, 2.0, 2.5, 1.0])
    for k, cls in enumerate((nib.Nifti1Image, nib.Nifti2Image)):
        scaled = cls((x * 100).astype(np.int16), affine)
        scaled.header.set_slope_inter(0.5, 3.0)
        for name, img in ((f"f{k}.nii.gz", cls(x, affine)), (f"i{k}.nii.gz", scaled)):
            nib.save(img, str(tmp_path / name))
            data, got_affine = load_volume(tmp_path / name)
            want = nib.load(str(tmp_path / name))
            assert np.array_equal(data, np.asarray(want.dataobj, dtype=np.float32))
            assert np.array_equal(got_affine, want.affine)
    raw = gzip.decompress((tmp_path / "f0.nii.gz").read_bytes())
    (tmp_path / "members.nii.gz").write_bytes(gzip.compress(raw[:1000]) + gzip.compress(raw[1000:]) + bytes(16))
    assert np.array_equal(load_volume(tmp_path / "members.nii.gz")[0], x)
    (tmp_path / "cut.nii.gz").write_bytes((tmp_path / "f0.nii.gz").read_bytes()[:-50])
    with pytest.raises(VolumeError, match=r"cut.nii.gz: unreadable volume \(OSError: truncated gzip stream"):
        load_volume(tmp_path / "cut.nii.gz")
    (tmp_path / "text.nii.gz").write_bytes(gzip.compress(b"not a nifti file" * 40))
    with pytest.raises(VolumeError, match="text.nii.gz: unreadable volume .*not a NIfTI file"):
        load_volume(tmp_path / "text.nii.gz")


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("crash mid-write")
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_json_is_strict(tmp_path):
    write_json(tmp_path / "m.json", {"auc": float("nan"), "n": np.int64(3), "x": np.float32(0.5)})
    assert json.loads((tmp_path / "m.json").read_text()) == {"auc": None, "n": 3, "x": 0.5}

"""Converters into {split}.source/.target: CNN/DM stories, Hugging Face exports, the XSum tarball."""
import io
import json
import os
import subprocess
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bart.data.cnn_dm_stories import parse_story, story_name
from bart.data.prepare_summarization import (
    convert_cnn_dm,
    convert_hf,
    convert_xsum,
    main,
)
from tests.helpers import ROOT as REPO

STORY = """(CNN) -- The river rose overnight

Officials said \u201cwe are ready.\u201d
Schools (all of them) closed early
Roads stayed open?

@highlight

River rose overnight

@highlight

Schools closed early, officials say.
"""


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def test_story_cleaning_completes_sentences_and_joins_highlights():
    article, summary = parse_story(STORY)
    assert article == ("(CNN) -- The river rose overnight . Officials said \u201cwe are ready.\u201d "
                       "Schools (all of them) closed early . Roads stayed open?")
    assert summary == "River rose overnight . Schools closed early, officials say."


def test_story_name_is_the_sha1_of_the_url():
    url = "http://www.cnn.com/2015/04/01/world/example/index.html"
    digest = subprocess.run(["sha1sum"], input=url.encode(), capture_output=True, check=True).stdout.split()[0]
    assert story_name(url) == digest.decode() + ".story"


def _story_tree(tmp_path, empty_article_url=None):
    """Two story folders (cnn, dailymail) and url lists; returns (lists, dirs, urls by split)."""
    lists, cnn, dm = tmp_path / "lists", tmp_path / "cnn" / "stories", tmp_path / "dm" / "stories"
    for d in (lists, cnn, dm):
        d.mkdir(parents=True)
    urls = {}
    for split, n in (("train", 5), ("val", 2), ("test", 3)):
        urls[split] = [f"http://www.{'cnn' if i % 2 else 'dailymail'}.com/{split}/{i}" for i in range(n)]
        (lists / f"all_{split}.txt").write_text("\n".join(urls[split]) + "\n")
        for i, url in enumerate(urls[split]):
            body = f"{split} article {i}\n\n@highlight\n\n{split} summary {i}\n"
            if url == empty_article_url:
                body = f"@highlight\n\n{split} summary {i}\n"
            (cnn if i % 2 else dm).joinpath(story_name(url)).write_text(body)
    return lists, [str(cnn), str(dm)], urls


def test_cnn_dm_stories_follow_the_split_lists_in_order(tmp_path):
    empty = "http://www.dailymail.com/train/2"
    lists, dirs, urls = _story_tree(tmp_path, empty_article_url=empty)
    out = tmp_path / "out"
    convert_cnn_dm(str(lists), dirs, str(out))
    assert _lines(out / "train.source") == [f"train article {i} ." for i in (0, 1, 3, 4)]
    assert _lines(out / "train.target") == [f"train summary {i} ." for i in (0, 1, 3, 4)]
    assert _lines(out / "test.source") == [f"test article {i} ." for i in range(3)]
    assert len(_lines(out / "val.target")) == 2
    skipped = _lines(out / "train.skipped")
    assert len(skipped) == 1 and skipped[0].startswith(empty) and "empty article" in skipped[0]
    assert _lines(out / "val.skipped") == []


def test_cnn_dm_missing_story_names_the_url(tmp_path):
    lists, dirs, urls = _story_tree(tmp_path)
    os.remove(os.path.join(dirs[0], story_name(urls["val"][1])))
    with pytest.raises(FileNotFoundError, match=r"val/1.*\.story"):
        convert_cnn_dm(str(lists), dirs, str(tmp_path / "out"))


def test_get_data_script_unpacks_story_archives(tmp_path):
    lists, dirs, urls = _story_tree(tmp_path)
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    os.rename(lists, data / "raw" / "url_lists")  # present: nothing is downloaded
    archives = []
    for d in dirs:
        archive = tmp_path / f"{os.path.basename(os.path.dirname(d))}_stories.tgz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(os.path.dirname(d), arcname=os.path.basename(os.path.dirname(d)))
        archives.append(archive)
    (data / "xsum").mkdir()
    for split in ("train", "val", "test"):
        for side in ("source", "target"):
            (data / "xsum" / f"{split}.{side}").write_text("x\n")
    env = dict(os.environ, CNN_STORIES=str(archives[0]), DM_STORIES=str(archives[1]))
    run = subprocess.run(["bash", "scripts/get_data.sh", str(data)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=None)
    assert run.returncode == 0, run.stderr
    assert "xsum: complete, nothing to do" in run.stdout
    assert _lines(data / "cnn_dm" / "train.source") == [f"train article {i} ." for i in range(5)]
    again = subprocess.run(["bash", "scripts/get_data.sh", str(data)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=None)
    assert "cnn_dm: complete, nothing to do" in again.stdout


def test_hf_exports_jsonl_and_parquet(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    rows = [{"document": f"doc {i}\nsecond line", "summary": f"sum {i}", "id": str(i)} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows[:1]), export / "train-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[1:]), export / "train-00001-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[:2]), export / "validation-00000-of-00001.parquet")
    # a byte-order mark (as Windows editors write one) is not text: was a JSONDecodeError on the first line
    (export / "test.jsonl").write_text("\ufeff" + "".join(json.dumps(r) + "\n" for r in rows[2:]), encoding="utf-8")
    out = tmp_path / "out"
    convert_hf(str(export), str(out), None, None)
    assert _lines(out / "train.source") == [f"doc {i} second line" for i in range(3)]
    assert _lines(out / "val.target") == ["sum 0", "sum 1"]
    assert _lines(out / "test.source") == ["doc 2 second line"]


def test_hf_export_errors(tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps({"text": "a", "label": "b"}) + "\n")
    with pytest.raises(ValueError, match="--text_column and --summary_column"):
        convert_hf(str(tmp_path), str(tmp_path / "out"), None, None)
    (tmp_path / "train.jsonl").write_text(json.dumps({"article": "a", "highlights": ""}) + "\n")
    with pytest.raises(ValueError, match="train row 1: empty target"):
        convert_hf(str(tmp_path), str(tmp_path / "out"), None, None)
    with pytest.raises(FileNotFoundError, match="no .jsonl"):
        convert_hf(str(tmp_path / "nothing"), str(tmp_path / "out"), None, None)


def test_table_files_of_every_kind_read_the_same(tmp_path):
    """transformers' --train_file formats: CSV (a header row, quoted newlines), JSON Lines, a JSON array; columns
    named or found (not: a folder of .csv refused, "no .jsonl/.json/.parquet files")."""
    import csv

    from bart.data.prepare_summarization import convert_files
    from bart.data.summarization import read_split

    rows = [{"body": "First text,\nwith a comma.", "tl_dr": "First."}, {"body": "Second text.", "tl_dr": "Second."}]
    with open(tmp_path / "train.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, ["body", "tl_dr"])
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "test.json").write_text(json.dumps(rows))
    files = {"train": str(tmp_path / "train.csv"), "val": str(tmp_path / "val.jsonl"), "test": str(tmp_path / "test.json")}
    assert convert_files(files, str(tmp_path / "out"), "body", "tl_dr") == {"train": 2, "val": 2, "test": 2}
    for split in files:
        assert read_split(str(tmp_path / "out"), split) == (["First text, with a comma.", "Second text."],
                                                            ["First.", "Second."])
    with pytest.raises(ValueError, match="name the text and summary columns"):
        convert_files({"train": str(tmp_path / "train.csv")}, str(tmp_path / "x"))
    (tmp_path / "empty.csv").write_text("body,tl_dr\nsome text,\n")
    with pytest.raises(ValueError, match="empty.csv row 1: empty tl_dr"):
        convert_files({"train": str(tmp_path / "empty.csv")}, str(tmp_path / "x"), "body", "tl_dr")


def _tarball(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"xsum/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_xsum_tarball(tmp_path):
    members = {f"{s}.{side}": f"{s} {side} one\n{s} {side} two\n" for s in ("train", "val", "test")
               for side in ("source", "target")}
    _tarball(tmp_path / "xsum.tar.gz", members)
    convert_xsum(str(tmp_path / "xsum.tar.gz"), str(tmp_path / "out"))
    assert _lines(tmp_path / "out" / "val.target") == ["val target one", "val target two"]
    del members["test.target"]
    _tarball(tmp_path / "broken.tar.gz", members)
    with pytest.raises(SystemExit, match="has no test.target"):
        main(["xsum", "--tarball", str(tmp_path / "broken.tar.gz"), "--out", str(tmp_path / "out2")])


def test_lead_summaries_and_training_passages(tmp_path, punkt_dir):
    docs = [f"Doc {d} opens here. It goes on for a while. Then it ends, at last." for d in range(5)]
    (tmp_path / "docs.txt").write_text("\n".join(docs) + "\n\n")
    out = tmp_path / "out"
    main(["lead", "--input", str(tmp_path / "docs.txt"), "--out", str(out), "--sizes", "3", "1", "1",
          "--train_passages"])
    train = list(zip(_lines(out / "train.source"), _lines(out / "train.target")))
    assert len(train) == 6  # two passages per training document (each keeps at least two sentences)
    assert train[0] == (docs[0], "Doc 0 opens here.")
    assert train[1] == ("It goes on for a while. Then it ends, at last.", "It goes on for a while.")
    assert list(zip(_lines(out / "test.source"), _lines(out / "test.target"))) == [(docs[4], "Doc 4 opens here.")]
    with pytest.raises(SystemExit, match="fewer than the 9 asked for"):
        main(["lead", "--input", str(tmp_path / "docs.txt"), "--out", str(out), "--sizes", "7", "1", "1"])


def test_get_data_script_downloads_everything_from_a_mirror(tmp_path):
    """With nothing at hand, get_data.sh downloads XSum, the two CNN/DM story archives and the split
    lists (here from a local mirror laid out as the originals, through curl's file:// URLs)."""
    lists, dirs, urls = _story_tree(tmp_path)
    mirror = tmp_path / "mirror"
    (mirror / "url_lists").mkdir(parents=True)
    for name in os.listdir(lists):
        os.rename(lists / name, mirror / "url_lists" / name)
    for d, name in zip(dirs, ("cnn", "dailymail")):
        with tarfile.open(mirror / f"{name}_stories.tgz", "w:gz") as tar:
            tar.add(os.path.dirname(d), arcname=name)
    _tarball(mirror / "xsum.tar.gz", {f"{s}.{side}": f"{s} {side} one\n" for s in ("train", "val", "test")
                                      for side in ("source", "target")})
    data = tmp_path / "data"
    env = dict(os.environ, CNN_DM_MIRROR=f"file://{mirror}", XSUM_URL=f"file://{mirror}/xsum.tar.gz")
    for name in ("CNN_STORIES", "DM_STORIES", "CNN_DM_EXPORT"):
        env.pop(name, None)
    run = subprocess.run(["bash", "scripts/get_data.sh", str(data)], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=None)
    assert run.returncode == 0, run.stderr
    assert _lines(data / "xsum" / "val.target") == ["val target one"]
    assert _lines(data / "cnn_dm" / "test.source") == [f"test article {i} ." for i in range(3)]
    assert not list(data.rglob("*.partial"))

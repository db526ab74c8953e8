"""Lines of the user's text files read as Python's text mode reads them: CR-only, CRLF and LF line ends the
same, a count mismatch from mixed line ends named, a UTF-8 byte-order mark removed and said once (the
training run then the same as on the plain files); through run_eval.py, the summarization reader, the
tokenizer corpus and the XSum converter."""
import os

import pytest

from bart.errors import UserError
from tests.helpers.entry import run_entry as _main
from tests.helpers.user_inputs import (
    EV,
    FT,
)
from tests.helpers.user_inputs import argv as _argv
from tests.helpers.user_inputs import first_loss as _first_loss


def test_cr_only_split_is_read_line_by_line_by_run_eval(user_inputs, tmp_path, capsys):
    """A CR-only test split of four sources is four examples: four generations, not one."""
    out = str(tmp_path / "out")
    code = _main("run_eval.py", _argv(EV, user_inputs, out, model=user_inputs["weights"], data=user_inputs["data_cr"]))
    assert code == 0, capsys.readouterr().err[-3000:]
    with open(os.path.join(out, "test_generations.txt"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 4


def test_line_ends_of_every_kind_read_the_same(user_inputs, tmp_path):
    from bart.data.summarization import read_split
    expected = read_split(user_inputs["data"], "train")
    assert len(expected[0]) == 16
    for name, end in (("crlf", b"\r\n"), ("cr", b"\r")):
        folder = tmp_path / name
        folder.mkdir()
        for side in ("source", "target"):
            data = open(os.path.join(user_inputs["data"], f"train.{side}"), "rb").read()
            (folder / f"train.{side}").write_bytes(data.replace(b"\n", end).rstrip(end))  # no final line end too
        assert read_split(str(folder), "train") == expected, name


def test_mixed_line_ends_count_mismatch_is_one_line_naming_the_cause(tmp_path):
    from bart.data.summarization import read_split
    (tmp_path / "train.source").write_bytes(b"First source.\nSecond one, with a stray \r inside.\nThird.\n")
    (tmp_path / "train.target").write_bytes(b"A.\nB.\nC.\n")
    with pytest.raises(UserError) as err:
        read_split(str(tmp_path), "train")
    text = str(err.value)
    assert "train.source has 4 lines but" in text and "train.target has 3" in text, text
    assert "mixes line ends" in text and "train.source" in text.split("mixes")[0], text


def test_tokenizer_corpus_and_xsum_read_cr_only_lines(tmp_path):
    import io
    import tarfile

    from bart.data.prepare_summarization import convert_xsum
    from bart.tokenization.train_tokenizer import iter_corpus
    corpus = tmp_path / "old_mac.txt"
    corpus.write_bytes(b"one line\rtwo line\r\rthree\r")
    assert list(iter_corpus([str(corpus)])) == ["one line", "two line", "three"]  # three lines, not one text
    tarball = tmp_path / "xsum.tar"
    with tarfile.open(tarball, "w") as tar:
        for split in ("train", "val", "test"):
            # a line separator (U+2028) inside an article is not a line end: str.splitlines shifted every later
            # source against its target
            for side, data in (("source", "Article one\u2028 continued.\rArticle two.\r"), ("target", "One.\rTwo.\r")):
                payload = data.encode("utf-8")
                info = tarfile.TarInfo(f"xsum/{split}.{side}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    convert_xsum(str(tarball), str(tmp_path / "out"))
    assert (tmp_path / "out" / "train.source").read_text().splitlines() == ["Article one continued.", "Article two."]


def test_a_byte_order_mark_is_removed_and_said_once(user_inputs, plain_loss, tmp_path, capsys):
    """The mark does not reach the tokenizer as text of the first line: the first loss is the plain files'."""
    data = tmp_path / "bom"
    data.mkdir()
    for name in os.listdir(user_inputs["data"]):
        (data / name).write_bytes(b"\xef\xbb\xbf" + open(os.path.join(user_inputs["data"], name), "rb").read())
    out = str(tmp_path / "out")
    capsys.readouterr()
    assert _main("finetune.py", _argv(FT + ["--init_checkpoint", "{weights}", "--log_freq", "1"], user_inputs, out,
                                      data=str(data))) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "byte-order mark" in line]
    assert sorted(said) == [f"note: {data / n} starts with a UTF-8 byte-order mark: removed (it is not part of the "
                            f"text)" for n in ("train.source", "train.target")], said
    assert _first_loss(out) == pytest.approx(plain_loss, abs=1e-6)

"""Build ``{train,val,test}.source/.target`` folders from other layouts.

    python -m bart.data.prepare_summarization hf --input cnn_dailymail/ --out data/cnn_dm
        (Hugging Face datasets exports or table files: *.jsonl / *.json / *.parquet / *.csv named by split;
         columns article/highlights (CNN/DM) or document/summary (XSum) are found automatically, others named
         with --text_column/--summary_column)
    python -m bart.data.prepare_summarization xsum --tarball xsum.tar.gz --out data/xsum
    python -m bart.data.prepare_summarization cnn_dm --url_lists url_lists/ \
        --stories cnn/stories dailymail/stories --out data/cnn_dm
        (the raw .story archives and the standard split lists; see bart/data/cnn_dm_stories.py)
    python -m bart.data.prepare_summarization lead --input docs.txt --out data/demo --sizes 250 25 25 \
        [--train_passages]
        (one document per line → the document as source, its first sentence as target)

Newlines inside a field become spaces (one example per line); outputs are written to temporary
names and renamed; line counts are checked; nothing is dropped silently (an empty example is an
error naming the split and row).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tarfile

from bart.files.text_lines import split_lines
from bart.records.progress import track

SPLIT_NAMES = {"train": "train", "validation": "val", "val": "val", "valid": "val", "dev": "val", "test": "test"}
COLUMN_PAIRS = (("article", "highlights"), ("document", "summary"), ("source", "target"))


def _clean(text: str) -> str:
    return " ".join(str(text).split())


def write_split(out_dir: str, split: str, sources: list[str], targets: list[str], where: str | None = None,
                columns: tuple[str, str] = ("source", "target")) -> None:
    """``out_dir``/{split}.source/.target; an empty example is an error naming ``where`` it came from (default: the
    split) and its row and ``columns``' name."""
    if len(sources) != len(targets):
        raise ValueError(f"{split}: {len(sources)} sources but {len(targets)} targets")
    for row, (s, t) in enumerate(zip(sources, targets)):
        if not s or not t:
            raise ValueError(f"{where or split} row {row + 1}: empty {columns[0] if not s else columns[1]}; fix or "
                             f"remove it")
    os.makedirs(out_dir, exist_ok=True)
    for side, lines in (("source", sources), ("target", targets)):
        path = os.path.join(out_dir, f"{split}.{side}")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
        os.replace(path + ".tmp", path)
    print(f"wrote {split}: {len(sources)} examples")


TABLE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")  # what transformers' run_summarization.py reads too


def _rows(path: str) -> list[dict]:
    """A table file's rows: Parquet, CSV (a header row), JSON Lines, or a JSON array of objects (a file of one
    JSON value; datasets' ``to_json`` writes lines, pandas' ``to_json(orient="records")`` an array)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()
    if path.endswith(".csv"):
        import csv
        with open(path, encoding="utf-8-sig", newline="") as f:
            return list(csv.DictReader(f))
    with open(path, encoding="utf-8-sig") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        rows = json.loads(text)
        if not all(isinstance(row, dict) for row in rows):
            raise ValueError(f"{path}: a JSON array of objects (one per example) is expected")
        return rows
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number} is not a JSON line ({err.msg}); one JSON object per line, or "
                                 f"one JSON array of objects") from None
    return rows


def _columns(path: str, rows: list[dict], source_column: str | None, target_column: str | None) -> tuple[str, str]:
    """The source and target columns: those given, else a known pair (CNN/DM's article/highlights, XSum's
    document/summary, source/target)."""
    columns = set(rows[0]) if rows else set()
    found = next(((a, b) for a, b in COLUMN_PAIRS if {a, b} <= columns), (None, None))
    src, tgt = source_column or found[0], target_column or found[1]  # a column named is always the one taken
    if src not in columns or tgt not in columns:
        raise ValueError(f"{path} has columns {sorted(columns)}; name the text and summary columns "
                         f"(--text_column and --summary_column)")
    return src, tgt


def convert_files(files: dict[str, str], out_dir: str, source_column: str | None = None,
                  target_column: str | None = None) -> dict[str, int]:
    """{split: a table file} (train/val/test; transformers' --train_file, --validation_file, --test_file) as
    ``out_dir``/{split}.source/.target; returns the examples per split. Every row goes through the same checks
    as the recipe's own files (an empty text or summary is an error naming the file and row)."""
    counts = {}
    for split, path in files.items():
        if not path.endswith(TABLE_SUFFIXES):
            raise ValueError(f"{path}: a .csv, .json, .jsonl or .parquet file is expected")
        rows = _rows(path)
        if not rows:
            raise ValueError(f"{path} holds no rows")
        src, tgt = _columns(path, rows, source_column, target_column)
        sources, targets = [_clean(r[src] or "") for r in rows], [_clean(r[tgt] or "") for r in rows]
        write_split(out_dir, split, sources, targets, where=path, columns=(src, tgt))
        counts[split] = len(sources)
    return counts


# transformers' run_summarization.py (summarization_name_mapping): the text and summary columns of the hub's
# summarization datasets, by name (a hub id's part after its owner: abisee/cnn_dailymail is cnn_dailymail)
DATASET_COLUMNS = {
    "amazon_reviews_multi": ("review_body", "review_title"),
    "big_patent": ("description", "abstract"),
    "cnn_dailymail": ("article", "highlights"),
    "orange_sum": ("text", "summary"),
    "pn_summary": ("article", "summary"),
    "psc": ("extract_text", "summary_text"),
    "samsum": ("dialogue", "summary"),
    "thaisum": ("body", "summary"),
    "xglue": ("news_body", "news_title"),
    "xsum": ("document", "summary"),
    "wiki_summary": ("article", "highlights"),
    "multi_news": ("document", "summary"),
}
SPLIT_SPELLINGS = {"train": ("train",), "val": ("validation", "val", "valid", "dev"), "test": ("test",)}


def _datasets_cache() -> str:
    import datasets
    return str(datasets.config.HF_DATASETS_CACHE)


def _load_dataset_error(err: Exception, name: str, config: str | None) -> str:
    """datasets' failure to load ``name`` as one line naming the flag and the fix."""
    import re

    import datasets

    said = " ".join(str(err).split())
    asked = f"--dataset_name {name}" + (f" --dataset_config_name {config}" if config else "")
    configs = re.search(r"Available(?: configs in the cache)?: (\[[^]]*\])", str(err))
    if isinstance(err, ConnectionError):
        hub = ("the hub is off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)" if datasets.config.HF_HUB_OFFLINE
               else "the hub cannot be reached")
        load = f"datasets.load_dataset({name!r}" + (f", {config!r}" if config else "") + ")"
        return (f"{asked}: no local folder of that name, {hub}, and the datasets cache {_datasets_cache()} holds no "
                f"copy of it; run {load} once where the hub is reachable, with this HF_DATASETS_CACHE (or HF_HOME), "
                f"or give a local folder of its files")
    if configs and config:
        where = "the datasets cache holds" if "in the cache" in str(err) else "it has"
        return (f"{asked}: {name} has no configuration {config!r} ({where} {configs.group(1)}); give one of those "
                f"to --dataset_config_name")
    if "Config name is missing" in said:
        return f"{asked}: {name} has several configurations ({said.split(': ', 1)[-1]}); name one with --dataset_config_name"
    if "Couldn't find any data file" in said or "No (supported) data files found" in said:
        return (f"{asked}: {said} (it reads a folder of .csv, .json, .jsonl or .parquet files named by split: train, "
                f"validation, test; a folder of .source/.target files is --data_dir, a single file --train_file)")
    return f"{asked}: datasets cannot load it: {said}"


def load_named_dataset(name: str, config: str | None = None):
    """``datasets.load_dataset(name, config)`` (a hub id, read from the datasets cache when offline, or a local
    folder): its DatasetDict. Every failure is a ValueError of one line naming the flag and the fix, the datasets
    package missing too (an optional dependency: ``pip install datasets``)."""
    try:
        import datasets
    except ImportError:
        raise ValueError(f"--dataset_name reads through the datasets package, which is not installed in this Python "
                         f"({sys.executable}); install it: pip install datasets (or pip install "
                         f"'bart-recipe[datasets]')") from None
    verbosity = datasets.logging.get_verbosity()
    bars = datasets.utils.are_progress_bars_disabled()
    datasets.logging.set_verbosity_error()  # its notes ("using the latest cached version") and bars: not ours
    datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(name, config)
    except (OSError, ValueError, datasets.exceptions.DatasetsError) as err:
        raise ValueError(_load_dataset_error(err, name, config)) from None
    finally:
        datasets.logging.set_verbosity(verbosity)
        if not bars:
            datasets.enable_progress_bars()


def _dataset_revision(split) -> str | None:
    """The hub commit a dataset split was read at: the hash folder of its cache files
    (``<cache>/<owner>___<name>/<config>/<version>/<commit>/``), None where it has none."""
    files = [f["filename"] for f in getattr(split, "cache_files", []) if "filename" in f]
    return os.path.basename(os.path.dirname(files[0])) if files else None


def convert_dataset(name: str, config: str | None, splits: tuple, out_dir: str, source_column: str | None = None,
                    target_column: str | None = None) -> tuple[dict, dict]:
    """A Hugging Face dataset's ``splits`` (train/val/test; its own names train/validation/test) as
    ``out_dir``/{split}.source/.target, through the same checks as the recipe's own files (an empty text or summary
    is an error naming the split and row). The columns: those given, else transformers' for the dataset's name
    (:data:`DATASET_COLUMNS`), else a known pair. Returns (examples per split, what was read: the name, the
    configuration, each split's rows and fingerprint, the hub commit where known). Failures are ValueErrors of
    one line."""
    loaded = load_named_dataset(name, config)
    asked = f"--dataset_name {name}"
    counts, read = {}, {"dataset_name": name, "dataset_config_name": config, "splits": {}}
    for split in splits:
        found = next((spelling for spelling in SPLIT_SPELLINGS[split] if spelling in loaded), None)
        if found is None:
            fix = {"val": "add --n_val 0 (no validation during training)",
                   "test": "drop --do_predict"}.get(split, "give a dataset with a train split")
            raise ValueError(f"{asked} has no {SPLIT_SPELLINGS[split][0]} split (its splits: "
                             f"{', '.join(loaded) or 'none'}); {fix}")
        rows = loaded[found]
        columns = list(rows.column_names)
        known = DATASET_COLUMNS.get(name.rstrip("/").split("/")[-1], (None, None))
        pair = next(((a, b) for a, b in COLUMN_PAIRS if {a, b} <= set(columns)), (None, None))
        src = source_column or (known[0] if known[0] in columns else pair[0])
        tgt = target_column or (known[1] if known[1] in columns else pair[1])
        for flag, column in (("--text_column", src), ("--summary_column", tgt)):
            if column is None:
                raise ValueError(f"{asked} {found}: its columns are {', '.join(columns)}; name the text and summary "
                                 f"columns (--text_column and --summary_column)")
            if column not in columns:
                raise ValueError(f"{asked} {found} has no column {column!r} ({flag}); its columns: "
                                 f"{', '.join(columns)}")
        sources, targets = [], []
        for column, side in ((src, sources), (tgt, targets)):
            for row, value in enumerate(rows[column]):
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"{asked} {found} row {row + 1}: column {column!r} holds {type(value).__name__}, "
                                     f"not text; name a text column (--text_column / --summary_column)")
                side.append(_clean(value or ""))
        write_split(out_dir, split, sources, targets, where=f"{name} {found}", columns=(src, tgt))
        counts[split] = len(sources)
        read["dataset_config_name"] = getattr(rows.info, "config_name", None) or config
        read["splits"][split] = {"split": found, "rows": len(sources), "columns": [src, tgt],
                                 "fingerprint": getattr(rows, "_fingerprint", None)}
        if not os.path.exists(name):  # a hub id: the commit its cache was read at
            read["revision"] = _dataset_revision(rows)
    return counts, read


def convert_hf(input_path: str, out_dir: str, source_column: str | None, target_column: str | None) -> None:
    files = [input_path] if os.path.isfile(input_path) else sorted(
        path for suffix in TABLE_SUFFIXES for path in glob.glob(os.path.join(input_path, "*" + suffix)))
    if not files:
        raise FileNotFoundError(f"no .jsonl/.json/.parquet/.csv files at {input_path}")
    by_split: dict[str, list[str]] = {}
    for path in files:  # shards such as train-00000-of-00003.parquet are concatenated in name order
        stem = os.path.basename(path).split(".")[0].split("-")[0].lower()
        split = SPLIT_NAMES.get(stem)
        if split is None:
            raise ValueError(f"cannot tell the split of {path}: name files train/validation/test")
        by_split.setdefault(split, []).append(path)
    for split, paths in by_split.items():
        sources, targets = [], []
        for path in track(paths, f"read {split}", unit="file"):
            rows = _rows(path)
            src, tgt = _columns(path, rows, source_column, target_column)
            sources += [_clean(r[src]) for r in rows]
            targets += [_clean(r[tgt]) for r in rows]
        write_split(out_dir, split, sources, targets)


def convert_xsum(tarball: str, out_dir: str) -> None:
    with tarfile.open(tarball) as tar:
        members = {os.path.basename(m.name): m for m in tar.getmembers() if m.isfile()}
        for split in ("train", "val", "test"):
            sides = []
            for side in ("source", "target"):
                member = members.get(f"{split}.{side}")
                if member is None:
                    raise ValueError(f"{tarball} has no {split}.{side}")
                text = tar.extractfile(member).read().decode("utf-8")
                sides.append([_clean(line) for line in split_lines(text)])  # \n, \r\n or old-Mac \r line ends
            write_split(out_dir, split, *sides)


def convert_cnn_dm(url_lists: str, story_dirs: list[str], out_dir: str) -> None:
    from bart.data.cnn_dm_stories import SPLIT_LISTS, convert_split

    for folder in story_dirs:
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"stories folder {folder} not found")
    for split, list_name in SPLIT_LISTS.items():
        articles, summaries, skipped = convert_split(os.path.join(url_lists, list_name), story_dirs)
        write_split(out_dir, split, articles, summaries)
        skipped_path = os.path.join(out_dir, f"{split}.skipped")
        with open(skipped_path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in skipped)
        os.replace(skipped_path + ".tmp", skipped_path)
        if skipped:
            print(f"{split}: left out {len(skipped)} stories with an empty article or no highlights "
                  f"(listed in {skipped_path})")


def convert_lead(input_path: str, out_dir: str, sizes: list[int], train_passages: bool = False) -> None:
    """Documents → (document, its first sentence). With ``train_passages`` every training document
    also gives one example per later sentence: the passage from that sentence on, and the sentence
    (validation and test keep whole documents, so no test text is seen in training)."""
    from bart.scoring.nltk_data import sent_tokenize

    with open(input_path, encoding="utf-8-sig") as f:
        documents = [_clean(line) for line in f if line.strip()]
    if sum(sizes) > len(documents):
        raise ValueError(f"{input_path} has {len(documents)} documents, fewer than the {sum(sizes)} asked for")
    start = 0
    for split, size in zip(("train", "val", "test"), sizes):
        docs = documents[start:start + size]
        start += size
        sources, targets = [], []
        for doc in track(docs, f"lead {split}", unit="document"):
            sentences = sent_tokenize(doc)
            last = len(sentences) - 1 if (split == "train" and train_passages) else 1
            for k in range(max(1, last)):
                sources.append(" ".join(sentences[k:]))
                targets.append(sentences[k])
        write_split(out_dir, split, sources, targets)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    hf = sub.add_parser("hf", help="Hugging Face datasets export or table files (jsonl/json/parquet/csv)")
    hf.add_argument("--input", required=True)
    hf.add_argument("--out", required=True)
    hf.add_argument("--source_column", "--text_column", dest="source_column")
    hf.add_argument("--target_column", "--summary_column", dest="target_column")
    xs = sub.add_parser("xsum", help="the XSum tarball with {split}.source/.target")
    xs.add_argument("--tarball", required=True)
    xs.add_argument("--out", required=True)
    cnn = sub.add_parser("cnn_dm", help="CNN/DM .story files with the all_{train,val,test}.txt url lists")
    cnn.add_argument("--url_lists", required=True, help="folder with all_train.txt, all_val.txt, all_test.txt")
    cnn.add_argument("--stories", required=True, nargs="+", help="folders of .story files (cnn and dailymail)")
    cnn.add_argument("--out", required=True)
    lead = sub.add_parser("lead", help="documents → first-sentence summaries")
    lead.add_argument("--input", required=True)
    lead.add_argument("--out", required=True)
    lead.add_argument("--sizes", type=int, nargs=3, default=[250, 25, 25], metavar=("TRAIN", "VAL", "TEST"))
    lead.add_argument("--train_passages", action="store_true",
                      help="one training example per sentence of a training document (the passage from it on)")
    args = parser.parse_args(argv)
    try:
        if args.command == "hf":
            convert_hf(args.input, args.out, args.source_column, args.target_column)
        elif args.command == "xsum":
            convert_xsum(args.tarball, args.out)
        elif args.command == "cnn_dm":
            convert_cnn_dm(args.url_lists, args.stories, args.out)
        else:
            convert_lead(args.input, args.out, args.sizes, args.train_passages)
    except (FileNotFoundError, ValueError, UnicodeDecodeError) as err:
        sys.exit(f"prepare_summarization: {err}")


if __name__ == "__main__":
    main()

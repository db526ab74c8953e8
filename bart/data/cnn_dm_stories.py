"""CNN/Daily Mail ``.story`` files → one article and one summary per line.

The standard split lists (``all_train.txt``, ``all_val.txt``, ``all_test.txt``) hold article URLs;
each story file is named by the SHA-1 hex digest of its URL. A story is the article's lines, then
``@highlight`` markers each followed by one summary sentence. The cleaning is the usual one for
BART's cased, untokenized CNN/DM: every line that does not end in end punctuation gets `` .``,
article lines are joined with spaces, highlights are joined with spaces.

Stories whose article or highlights are empty (a few hundred in the published archives) cannot be
a training pair; they are left out, counted on stdout and listed in ``{split}.skipped`` next to
the outputs, as other preprocessors of this data do, so nothing disappears unnoticed. A URL whose
story file is missing is an error naming the URL, its file name and the folders searched.
"""
from __future__ import annotations

import hashlib
import os

from bart.records.progress import track

SPLIT_LISTS = {"train": "all_train.txt", "val": "all_val.txt", "test": "all_test.txt"}
# A line ending in one of these is a complete sentence already.
END_TOKENS = (".", "!", "?", "...", "'", "`", '"', "\u2019", "\u201d", ")")


def story_name(url: str) -> str:
    return hashlib.sha1(url.strip().encode("utf-8")).hexdigest() + ".story"


def complete_sentence(line: str) -> str:
    if "@highlight" in line or not line or line.endswith(END_TOKENS):
        return line
    return line + " ."


def parse_story(text: str) -> tuple[str, str]:
    """Return (article, summary) of one story's text, cleaned."""
    article, highlights = [], []
    next_is_highlight = False
    for raw in text.splitlines():
        line = complete_sentence(" ".join(raw.split()))
        if not line:
            continue
        if line.startswith("@highlight"):
            next_is_highlight = True
        elif next_is_highlight:
            highlights.append(line)
            next_is_highlight = False
        else:
            article.append(line)
    return " ".join(article), " ".join(highlights)


def read_url_list(path: str) -> list[str]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"split list {path} not found; download the url_lists folder of "
                                "abisee/cnn-dailymail (scripts/get_data.sh does)")
    with open(path, encoding="utf-8-sig") as f:
        return [line.strip() for line in f if line.strip()]


def find_story(name: str, story_dirs: list[str]) -> str | None:
    for folder in story_dirs:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None


def convert_split(url_list: str, story_dirs: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Return (articles, summaries, skipped urls) of one split, in the list's order."""
    articles, summaries, skipped = [], [], []
    for url in track(read_url_list(url_list), os.path.basename(url_list), unit="story"):
        name = story_name(url)
        path = find_story(name, story_dirs)
        if path is None:
            raise FileNotFoundError(f"{url_list}: the story of {url} ({name}) is in none of {story_dirs}; "
                                    "give the folders of both the CNN and the Daily Mail stories")
        try:
            with open(path, encoding="utf-8-sig") as f:
                article, summary = parse_story(f.read())
        except UnicodeDecodeError as err:
            raise ValueError(f"{path} (the story of {url}) is not UTF-8 text: {err}") from None
        if not article or not summary:
            skipped.append(f"{url}\t{name}\tempty {'article' if not article else 'highlights'}")
            continue
        articles.append(article)
        summaries.append(summary)
    return articles, summaries, skipped

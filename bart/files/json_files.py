"""JSON files read with the file named in what goes wrong (stdlib only: the export's ``--help`` and the tokenizer's
identity read JSON without importing torch)."""
import json


def read_json(path: str, error: type[Exception] | None):
    """A JSON file's value. A file missing or unreadable raises ``error`` naming the file, or gives None where
    ``error`` is None (a record that may be absent or damaged: what reads it goes on without)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        if error is None:
            return None
        raise error(f"{path} is not readable JSON ({type(err).__name__}: {err})") from err

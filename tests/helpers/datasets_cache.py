"""A dataset of the Hugging Face hub in the ``datasets`` cache, written offline, in the layout
``datasets.load_dataset(repo_id, config)`` leaves after a download:

    <cache>/<owner>___<name>/<config>/<version>/<commit>/dataset_info.json
    <cache>/<owner>___<name>/<config>/<version>/<commit>/<name>-<split>.arrow

With ``HF_HUB_OFFLINE=1`` (or ``HF_DATASETS_OFFLINE=1``) ``load_dataset(repo_id[, config])`` then reads that copy,
as for a dataset downloaded before. The Arrow files are written by datasets' own JSON builder from JSON Lines files.
"""
import os
import shutil


def add_to_datasets_cache(cache_dir: str, repo_id: str, files: dict, config: str = "default",
                          commit: str = "0123456789abcdef0123456789abcdef01234567") -> str:
    """Put ``files`` ({split: a .jsonl file}) into ``cache_dir`` as configuration ``config`` of the hub dataset
    ``repo_id`` read at ``commit``; returns the folder of its Arrow files."""
    from datasets.data_files import DataFilesDict
    from datasets.packaged_modules.json.json import Json

    owner, name = repo_id.split("/")
    staging = os.path.join(cache_dir, "_staging")
    patterns = {split: [os.path.abspath(path)] for split, path in files.items()}
    builder = Json(cache_dir=staging, dataset_name=name, config_name=config, config_id=config, hash=commit,
                   data_files=DataFilesDict.from_patterns(patterns, base_path="/"))
    builder.download_and_prepare()
    target = os.path.join(cache_dir, f"{owner}___{name}", config)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.move(os.path.join(staging, name, config), target)
    shutil.rmtree(staging)
    return os.path.join(target, str(builder.config.version), commit)

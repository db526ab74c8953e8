"""A Hugging Face hub cache written offline, in the hub's own layout.

    <cache>/models--<org>--<name>/blobs/<sha256 of the file>
    <cache>/models--<org>--<name>/snapshots/<commit>/<file>  -> ../../blobs/<sha256> (relative symlink)
    <cache>/models--<org>--<name>/refs/main                  (the commit hash, no newline)

``huggingface_hub.snapshot_download(..., local_files_only=True)`` (what HF_HUB_OFFLINE=1 does) then
resolves the id to the snapshot folder, as for a repository downloaded before.
"""
import hashlib
import os


def add_to_hub_cache(cache_dir: str, repo_id: str, folder: str, revision: str = "main") -> str:
    """Put every file of ``folder`` into ``cache_dir`` as repository ``repo_id``; returns the snapshot path."""
    files = sorted(os.path.relpath(os.path.join(root, name), folder)
                   for root, _, names in os.walk(folder) for name in names)
    digests = {}
    for rel in files:
        with open(os.path.join(folder, rel), "rb") as f:
            digests[rel] = hashlib.sha256(f.read()).hexdigest()
    commit = hashlib.sha1("".join(f"{rel}:{digests[rel]}\n" for rel in files).encode()).hexdigest()
    repo = os.path.join(cache_dir, "models--" + repo_id.replace("/", "--"))
    snapshot = os.path.join(repo, "snapshots", commit)
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    for rel in files:
        blob = os.path.join(repo, "blobs", digests[rel])
        if not os.path.exists(blob):
            with open(os.path.join(folder, rel), "rb") as src, open(blob, "wb") as dst:
                dst.write(src.read())
        link = os.path.join(snapshot, rel)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
    with open(os.path.join(repo, "refs", revision), "w") as f:
        f.write(commit)
    return snapshot

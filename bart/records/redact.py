"""What the project records about a run or a build, without the secrets it may carry: a git remote's URL without
its user info and query (a CI checkout's ``https://gitlab-ci-token:TOKEN@host/...``), a command line without the
values of secret-looking flags (``--hub_token X``, ``--wandb_api_key=X``), environment variables without the values
of secret-looking names (``HF_TOKEN``).

    clean_url("https://gitlab-ci-token:S@host/team/bart.git?private_token=S")  # 'https://host/team/bart.git'
    mask_command(["python3", "pretrain.py", "--hub_token", "S"])              # [..., '--hub_token', '***']
    mask_env({"HF_TOKEN": "S", "WORLD_SIZE": "8"})                            # {'HF_TOKEN': '***', 'WORLD_SIZE': '8'}

Standard library only, no import of the package: setup.py loads this file by its path at build time
(bart/_build.json), where torch may not be installed; bart.records.provenance imports it for git_log.json.
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
# a name (a flag's, an environment variable's) one of whose words is one of these holds a secret
SECRET_WORDS = frozenset({"token", "secret", "secrets", "password", "passwd", "pwd", "passphrase", "apikey", "key",
                          "auth", "credential", "credentials", "pat"})
# ... and so does one that ends with one of these, words run together (--hubtoken, WANDBAPIKEY)
_SECRET_ENDINGS = ("token", "secret", "password", "passwd", "apikey")
# the user of an ssh remote kept (git@host:team/bart.git): a login name; anything else (a token as the user) dropped
_LOGIN = re.compile(r"[a-z_][a-z0-9_.-]{0,15}")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_SSH_SCHEMES = {"ssh", "git+ssh", "ssh+git"}


def is_secret_name(name: str) -> bool:
    """Whether a flag (``--hub_token``, leading dashes ignored) or an environment variable (``WANDB_API_KEY``) names
    a secret: a word of it (split at ``_``, ``-``, ``.`` and lower-to-upper case changes) is token, secret, password,
    key, auth, ... (``SECRET_WORDS``), or it ends with token, secret, password, apikey. ``--tokenizer`` and
    ``--max_tokens_per_batch`` do not."""
    name = name.lstrip("-")
    words = [w.lower() for w in re.split(r"[-_.\s]+|(?<=[a-z0-9])(?=[A-Z])", name) if w]
    joined = "".join(words)
    return any(w in SECRET_WORDS for w in words) or joined.endswith(_SECRET_ENDINGS)


def _kept_user(user: str) -> str:
    """``user@`` when ``user`` is a plain login name without a password (``git``), else nothing."""
    return f"{user}@" if _LOGIN.fullmatch(user) and not is_secret_name(user) else ""


def clean_url(url: str | None) -> str | None:
    """``url`` (a git remote: a URL, an scp-like ``user@host:path``, or a local path) without what may hold a
    secret: the user info of a URL (``user:password@``; an ssh URL keeps a plain login name, ``ssh://git@host/...``),
    its query and fragment (``?private_token=...``); an scp-like remote keeps its user only when it is a plain
    login name (``git@host:team/bart.git``). A local path is returned as it is; None stays None."""
    if url is None:
        return None
    url = str(url)
    if _SCHEME.match(url):
        try:
            parts = urlsplit(url)
            userinfo, at, hostport = parts.netloc.rpartition("@")
            user = _kept_user(userinfo) if at and parts.scheme.lower() in _SSH_SCHEMES else ""
            return urlunsplit((parts.scheme, user + hostport, parts.path, "", ""))
        except ValueError:  # e.g. an unbalanced IPv6 bracket: cut by hand
            scheme, _, rest = url.partition("://")
            rest = re.split(r"[?#]", rest, maxsplit=1)[0]
            head, slash, path = rest.partition("/")
            return f"{scheme}://{head.rpartition('@')[2]}{slash}{path}"
    prefix = url.split("/", 1)[0]  # scp-like, [user[:password]@]host:path: the host and its colon before any slash
    for at in (i for i in range(len(prefix) - 1, -1, -1) if prefix[i] == "@"):
        if ":" in prefix[at + 1:]:  # the last "@" followed by host:...; the user info (a password too) before it
            return _kept_user(url[:at]) + url[at + 1:]
    return url


def mask_command(argv: list[str] | tuple[str, ...]) -> list[str]:
    """``argv`` with the value of every secret-looking flag (:func:`is_secret_name`) replaced by ``***``, as
    ``--flag VALUE`` or ``--flag=VALUE``, and every URL argument cleaned (:func:`clean_url`)."""
    masked: list[str] = []
    hide_next = False
    for arg in map(str, argv):
        if hide_next and not arg.startswith("--"):
            masked.append(MASK)
            hide_next = False
            continue
        hide_next = False
        if arg.startswith("-") and len(arg) > 1:
            name, eq, value = arg.partition("=")
            if is_secret_name(name):
                masked.append(f"{name}={MASK}" if eq else name)
                hide_next = not eq
            elif eq and _SCHEME.match(value):
                masked.append(f"{name}={clean_url(value)}")
            else:
                masked.append(arg)
        elif _SCHEME.match(arg):
            masked.append(clean_url(arg))
        else:
            masked.append(arg)
    return masked


def mask_env(env: dict) -> dict:
    """``env`` (name -> value) with the value of every secret-looking name (:func:`is_secret_name`) replaced by
    ``***`` (None, unset, kept)."""
    return {name: MASK if value is not None and is_secret_name(name) else value for name, value in env.items()}


__all__ = ["clean_url", "mask_command", "mask_env", "is_secret_name", "MASK"]

"""The NGC container's configuration, reproduced on a CPU machine from the Dockerfile itself.

    image = build_image(str(tmp_path / "image"), repo)   # the Dockerfile's build, as far as a CPU machine can
    subprocess.run([...], env=image.env(extra), cwd=repo)  # a command as a user types it inside the container

What is read from the Dockerfile (so that a change there changes every test that uses this):
- ``ENV``: applied as written. Absolute paths outside the repository (``/opt/...``) are rebased under the
  test's image root, so the test writes nothing outside its temporary folder; ``WORKDIR`` (where
  ``scripts/docker/launch.sh`` mounts the checkout) is the repository copy the test runs in.
- ``ARG`` defaults (the apex commit, the base image).
- ``RUN``: each step runs as written (paths rebased, ``python`` being this interpreter), except the steps
  that need the network or CUDA, which are replaced by what stands in for their result here (see
  ``SUBSTITUTES``): NVIDIA dllogger and apex by the test doubles in ``tests/doubles`` (each following the
  tag or commit the Dockerfile pins; the pin is checked against the double), a download from the model
  hub by a hub cache laid out in the hub's own format. A ``RUN`` step that is neither runnable nor
  substituted fails the build: a new build step has to be reproduced here, or this configuration would
  silently differ from the image.

What cannot be reproduced on a CPU machine: the base image's CUDA torch, apex's CUDA kernels, the system
MPI (``BART_USE_SYSTEM_MPI=1`` is applied, but pip's mpich of the test machine stays importable).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

from tests.helpers.doubles import DOUBLES, with_doubles  # noqa: F401 - DOUBLES: tests import it from here

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKERFILE = os.path.join(ROOT, "Dockerfile")
# Absolute paths of the image that a test rebases under its own folder.
REBASED_PREFIXES = ("/opt/",)


@dataclass
class Instruction:
    keyword: str
    text: str
    line: int


@dataclass
class Dockerfile:
    instructions: list[Instruction]
    args: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    workdir: str = "/"

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def _logical_lines(text: str):
    """(first line number, instruction text) with continuation lines joined and comments dropped."""
    buffer, start = [], None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buffer and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buffer and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        start = start or number
        if line.endswith("\\"):
            buffer.append(line[:-1])
            continue
        buffer.append(line)
        yield start, " ".join(part.strip() for part in buffer)
        buffer, start = [], None
    if buffer:
        yield start, " ".join(part.strip() for part in buffer)


def _expand(value: str, variables: dict) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), value)


def parse_dockerfile(path: str = DOCKERFILE) -> Dockerfile:
    """Instructions, ARG defaults, ENV (``KEY=value`` pairs, shell-quoted) and the last WORKDIR."""
    instructions = []
    for line, text in _logical_lines(open(path, encoding="utf-8").read()):
        keyword, _, rest = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), rest.strip(), line))
    parsed = Dockerfile(instructions)
    for instruction in instructions:
        if instruction.keyword == "ARG":
            name, _, default = instruction.text.partition("=")
            parsed.args[name.strip()] = default.strip()
        elif instruction.keyword == "ENV":
            words = shlex.split(instruction.text)
            if len(words) >= 2 and "=" not in words[0]:  # the legacy `ENV KEY value` form
                words = [f"{words[0]}={' '.join(words[1:])}"]
            for word in words:
                key, sep, value = word.partition("=")
                if not sep:
                    raise ValueError(f"{path}:{instruction.line}: ENV entry {word!r} is not KEY=value")
                parsed.env[key] = _expand(value, {**parsed.args, **parsed.env})
        elif instruction.keyword == "WORKDIR":
            parsed.workdir = instruction.text
    return parsed


# RUN steps that cannot run on this machine, by a pattern of their text: what stands in for their result.
SUBSTITUTES = {
    r"git\+https://github\.com/NVIDIA/dllogger@": "dllogger: tests/doubles/dllogger (the pinned tag's behaviour)",
    r"git\+https://github\.com/NVIDIA/apex": "apex: tests/doubles/apex (FusedLAMB of the pinned commit, on CPU)",
    r"snapshot_download": "a hub download: the hub cache the test lays out (its files in the hub's layout)",
}


def substitute_for(run_text: str) -> str | None:
    for pattern, what in SUBSTITUTES.items():
        if re.search(pattern, run_text):
            return what
    return None


@dataclass
class Image:
    """The image reproduced under ``root``: its environment and the log of its build."""
    root: str
    repo: str
    dockerfile: Dockerfile
    base_env: dict
    build_log: list = field(default_factory=list)

    def rebase(self, text: str) -> str:
        for prefix in REBASED_PREFIXES:
            text = text.replace(prefix, os.path.join(self.root, prefix.strip("/")) + "/")
        return text.replace(self.dockerfile.workdir, self.repo)

    def env(self, extra: dict | None = None) -> dict:
        """The container's environment: the machine's, the Dockerfile's ENV (rebased), ``python`` on PATH
        being this interpreter, the doubles importable as the image's installed packages are."""
        env = dict(self.base_env)
        env.update({key: self.rebase(value) for key, value in self.dockerfile.env.items()})
        env["PATH"] = os.path.join(self.root, "bin") + os.pathsep + env.get("PATH", "")
        env = with_doubles(env)
        env["PYTHON"] = sys.executable
        env.update(extra or {})
        return env


def build_image(root: str, repo: str = ROOT, base_env: dict | None = None, dockerfile: str = DOCKERFILE,
                timeout: int = 600) -> Image:
    """Run the Dockerfile's build steps for a CPU machine under ``root`` (see the module docstring)."""
    os.makedirs(os.path.join(root, "bin"), exist_ok=True)
    python = os.path.join(root, "bin", "python")
    if not os.path.exists(python):
        os.symlink(sys.executable, python)
    base = dict(os.environ if base_env is None else base_env)
    for key in ("TOKENIZER", "BART_DEFAULT_TOKENIZER", "HF_HOME", "HF_HUB_CACHE", "NLTK_DATA", "BART_NLTK_DATA"):
        base.pop(key, None)  # the machine's own settings would hide the image's
    image = Image(os.path.abspath(root), os.path.abspath(repo), parse_dockerfile(dockerfile), base)
    for instruction in image.dockerfile.of("RUN"):
        stand_in = substitute_for(instruction.text)
        if stand_in is not None:
            image.build_log.append((instruction.line, "substituted", stand_in))
            continue
        command = image.rebase(_expand(instruction.text, image.dockerfile.args))
        out = subprocess.run(["bash", "-c", command], cwd=image.repo, env=image.env(), capture_output=True,
                             text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"Dockerfile:{instruction.line}: RUN {instruction.text!r} failed here "
                               f"(exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        image.build_log.append((instruction.line, "ran", out.stdout[-500:]))
    return image

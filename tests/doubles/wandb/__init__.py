"""Stand-in for the ``wandb`` package (tests/doubles/README.md): what bart.records.metric_writers.WandbWriter uses of
wandb 0.17+'s API, with a W&B server kept in this process (``SERVER``: project -> run id -> the run's history), so
that a second ``init`` (a resumed run) meets the run the first one made.

Followed upstream: ``init(project, dir, config, id, resume)`` returns a ``Run`` (``id``, ``project``, ``resumed``,
``step``, ``summary``, ``log``, ``finish``) and sets ``wandb.run``; without ``id`` a new 8-character id;
``resume="allow"``: the run of that id goes on where it exists, else a new run with that id; ``"must"``: an
error where it does not exist; ``"never"``: an error where it does. ``log(data, step=N)`` at a step below the run's
current one drops the data with upstream's warning ("Tried to log to step N that is less than the current step
M..."), the unkind part a resumed run meets. Not followed: anything online; an ``id`` that exists with no
``resume`` is refused here (upstream's answer there has changed between versions). ``INITS`` keeps every
``init`` call's arguments, for the tests."""
import random
import string
import sys

SERVER: dict = {}  # project -> {run id: {"history": {step: {...}}, "step": int, "config": dict}}
INITS: list = []  # every init call's keyword arguments
run = None


class UsageError(Exception):
    pass


class errors:  # noqa: N801 - upstream's module wandb.errors
    UsageError = UsageError


class Run:
    def __init__(self, project, run_id, record, resumed):
        self.project, self.id, self._record, self.resumed = project, run_id, record, resumed
        self.summary = record.setdefault("summary", {})
        self.finished = False

    @property
    def step(self) -> int:
        return self._record["step"]

    @property
    def history(self) -> dict:
        return self._record["history"]

    def log(self, data, step=None, commit=None):
        if self.finished:
            raise UsageError("log() on a finished run")
        current = self._record["step"]
        step = current if step is None else step
        if step < current:
            print(f"wandb: WARNING Tried to log to step {step} that is less than the current step {current}. Steps "
                  f"must be monotonically increasing, so this data will be ignored.", file=sys.stderr)
            return
        self._record["step"] = step
        self._record["history"].setdefault(step, {}).update(data)

    def finish(self, exit_code=None):
        global run
        self.finished = True
        if run is self:
            run = None


def init(project=None, dir=None, config=None, id=None, resume=None, **kwargs):  # noqa: A002 - upstream's names
    global run
    INITS.append(dict(project=project, dir=dir, config=config, id=id, resume=resume, **kwargs))
    runs = SERVER.setdefault(project, {})
    exists = id is not None and id in runs
    if resume == "must" and not exists:
        raise UsageError(f"resume='must' but run ({id}) doesn't exist")
    if exists and resume in ("never", None, False):
        raise UsageError(f"run {id} exists and resume={resume!r}")
    run_id = id or "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    record = runs.setdefault(run_id, {"history": {}, "step": 0, "config": {}})
    record["config"].update(config or {})
    run = Run(project, run_id, record, resumed=exists)
    return run

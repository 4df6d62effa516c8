"""docs/cluster.md's two Slurm recipes, run as written on one machine.

There is no Slurm here: stand-in ``sbatch``, ``scancel`` and ``srun`` commands (small
Python scripts put first on ``PATH``) do what the recipes need of them:

- ``sbatch FILE`` copies the job file to a spool folder, runs it with ``bash`` in a new
  session (its ``#SBATCH`` lines are comments) with ``SLURM_JOB_ID`` set and its output
  in ``slurm-N.out``, records the process group and, when the script ends, its exit
  status; prints ``Submitted batch job N`` (what dask-jobqueue parses).
- ``scancel N`` sends SIGTERM to job N's process group.
- ``srun [options] CMD...`` runs CMD ``--ntasks`` times (default 1) at once and waits for
  them; ``--nodes``, ``--nodelist``, ``--exclude`` are accepted and ignored.

The code blocks are taken from docs/cluster.md and only a site's substitutions are made
(paths, the virtualenv, the network interface ``ib0`` -> ``lo``, the memory limit, 32
nodes -> 2); each must match exactly as often as expected, so a doc edit that breaks
them fails here. Checked: the store holds the 128 ranks, the HTML report is
byte-identical to the local engine's, ``report -f json`` on the recipe's engine equals
the local engine's, and (scheduler-file recipe, an MPI trace) the ``comm_matrix`` CSV
equals the local one. Every process started is killed at the end (process groups), and
none is left (``ps``). Skipped when dask_jobqueue is not installed (the ``test`` extra
installs it; under ``CI=true`` a missing dask_jobqueue fails).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from traceatlas.testing import Collective, TraceBuilder, write_multi_rank
from traceatlas.testing.mpi import write_mpi_trace

pytestmark = pytest.mark.dask

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"
BIN = Path(sys.executable).parent
RANKS = 128
NODES = 2
"""Worker "nodes" (jobs, srun tasks) instead of the recipes' 32."""
TIMEOUT_S = 300

SBATCH = """
import os, subprocess, sys
spool = os.environ["STANDIN_SLURM_SPOOL"]
n = 1
while True:  # job ids: the first free N.job in the spool (concurrent submissions)
    try:
        fd = os.open(f"{spool}/{n}.job", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        break
    except FileExistsError:
        n += 1
with open(sys.argv[-1], "rb") as script:  # sbatch [options] FILE
    os.write(fd, script.read())
os.close(fd)
log = open(f"{spool}/slurm-{n}.out", "wb")
proc = subprocess.Popen(
    ["bash", "-c", 'bash "$1"; echo $? > "$2.tmp"; mv "$2.tmp" "$2"', "job",
     f"{spool}/{n}.job", f"{spool}/{n}.rc"],
    start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    env=dict(os.environ, SLURM_JOB_ID=str(n)))
with open(f"{spool}/{n}.pgid", "w") as out:
    out.write(str(proc.pid))
print(f"Submitted batch job {n}")
"""

SCANCEL = """
import os, signal, sys
spool = os.environ["STANDIN_SLURM_SPOOL"]
for job in sys.argv[1:]:
    with open(f"{spool}/{job}.pgid") as f:
        pgid = int(f.read())
    with open(f"{spool}/scancel.log", "a") as log:
        log.write(job + "\\n")
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
"""

SRUN = """
import os, subprocess, sys
args, ntasks, i = sys.argv[1:], 1, 0
IGNORED = ("--nodes", "--nodelist", "--exclude")
while i < len(args) and args[i].startswith("-"):
    name, _, value = args[i].partition("=")
    if name == "--ntasks":
        ntasks = int(value)
    elif name not in IGNORED or not value:
        sys.exit(f"stand-in srun: option {args[i]!r} not handled")
    i += 1
with open(os.path.join(os.environ["STANDIN_SLURM_SPOOL"], "srun.log"), "a") as log:
    log.write(f"{ntasks} {' '.join(args[i:])}\\n")
procs = [subprocess.Popen(args[i:], env=dict(os.environ, SLURM_PROCID=str(k),
                                              SLURM_NTASKS=str(ntasks)))
         for k in range(ntasks)]
sys.exit(max(p.wait() for p in procs))
"""


def _code_block(heading: str, lang: str) -> str:
    """The first fenced ``lang`` block after the line ``heading`` in docs/cluster.md."""
    text = DOC.read_text()
    at = text.find(f"\n{heading}\n")
    assert at >= 0, f"docs/cluster.md has no heading {heading!r}"
    found = re.compile(rf"^```{lang}\n(.*?)^```$", re.S | re.M).search(text, at)
    assert found is not None, f"no ```{lang} block after {heading!r} in docs/cluster.md"
    return found.group(1)


def _substitute(text: str, subs: list[tuple[str, str, int]]) -> str:
    """Each (old, new, times): ``old`` must occur exactly ``times`` times."""
    for old, new, times in subs:
        assert text.count(old) == times, (
            f"docs/cluster.md: expected {old!r} {times} time(s), found {text.count(old)}: "
            "the recipe changed; update this test's substitutions")
        text = text.replace(old, new)
    return text


def _activate() -> str:
    """The line that activates this interpreter's environment on a "node"."""
    script = BIN / "activate"
    return f"source {script}" if script.is_file() else f'export PATH="{BIN}:$PATH"'


class Site:
    """A fake cluster site in ``root``: stand-in Slurm commands, spool, environment."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spool = root / "spool"
        self.spool.mkdir()
        bindir = root / "bin"
        bindir.mkdir()
        for name, body in (("sbatch", SBATCH), ("scancel", SCANCEL), ("srun", SRUN)):
            path = bindir / name
            path.write_text(f"#!{sys.executable}\n{body}")
            path.chmod(0o755)
        self.env = dict(os.environ, STANDIN_SLURM_SPOOL=str(self.spool),
                        PATH=f"{bindir}:{BIN}:{os.environ.get('PATH', '')}",
                        TRACEATLAS_CACHE_DIR=str(root / "cache"), NO_COLOR="1")
        self.env.pop("TRACEATLAS_ENGINE", None)
        self.groups: list[int] = []
        """Process groups started here (besides the spool's jobs)."""

    def popen(self, args: list[str]) -> subprocess.Popen[bytes]:
        """``args`` in its own process group, output in ``root/<name>.out``."""
        log = (self.root / f"{Path(args[-1]).name}.out").open("wb")
        proc = subprocess.Popen(args, cwd=self.root, env=self.env, start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
        self.groups.append(proc.pid)
        return proc

    def run(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        """A command that must succeed (exit 0), its stdout as text."""
        done = subprocess.run(args, cwd=self.root, env=self.env, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-4000:])
        return done

    def job_groups(self) -> list[int]:
        return [int(p.read_text()) for p in self.spool.glob("*.pgid")]

    def logs(self) -> str:
        """Every log the site wrote, for an assertion's message."""
        parts = [f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                 for p in sorted([*self.root.glob("*.out"), *self.spool.glob("*.out")])]
        return "\n".join(parts)

    def kill_all(self) -> list[str]:
        """SIGKILL every process group started here; the processes still alive after
        (``ps``: pid, pgid, state, command; zombies are dead and not counted)."""
        groups = set(self.groups) | set(self.job_groups())
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        left: list[str] = []
        for _ in range(50):
            ps = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True,
                                text=True, check=True).stdout.splitlines()
            left = [line for line in ps if int(line.split()[1]) in groups
                    and not line.split()[2].startswith("Z")]
            if not left:
                break
            time.sleep(0.1)
        return left


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    if os.environ.get("CI") == "true":  # the test extra installs it: missing is a failure
        import dask_jobqueue  # noqa: F401
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue not installed "
                        "(pip install -e '.[test]' installs it)")
    made = Site(tmp_path)
    try:
        yield made
    finally:
        left = made.kill_all()
        assert not left, f"processes left behind: {left}"


def _kineto_ranks(root: Path) -> None:
    """128 small rank files: two steps of a GEMM (longer on higher ranks) and an NCCL
    all-reduce over every rank."""
    builders = []
    every = Collective("allreduce", 1024, 1024, group_ranks=tuple(range(RANKS)))
    for r in range(RANKS):
        b = TraceBuilder(rank=r, world_size=RANKS)
        for step in range(2):
            t0 = step * 1_000_000
            b.step(step + 1, t0, t0 + 900_000)
            b.launch("void gemm()", t0 + 10_000, 5_000, t0 + 20_000, 100_000 + 1_000 * r)
            b.cpu_op("record_param_comms", t0 + 200_000, t0 + 210_000, collective=every)
            b.launch("ncclDevKernel_AllReduce_Sum_f32", t0 + 201_000, 5_000,
                     t0 + 300_000, 50_000, collective=every, stream=20)
        builders.append(b)
    write_multi_rank(root, builders)


def _local(site: Site, store: Path) -> tuple[bytes, object]:
    """The local engine's HTML report and JSON on ``store``."""
    html = site.root / "local-report.html"
    done = site.run(["traceatlas", "report", str(store), "--engine", "local", "-o", str(html),
                     "-f", "json"])
    return html.read_bytes(), json.loads(done.stdout.splitlines()[-1])


def _ranks(site: Site, store: Path) -> int:
    done = site.run(["traceatlas", "sql", str(store), "-f", "csv",
                     "SELECT count(DISTINCT rank) AS n FROM tracks"])
    return int(done.stdout.split()[-1])


def _wait(site: Site, proc: subprocess.Popen[bytes] | None, rc_file: Path | None) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return proc.returncode
        if rc_file is not None and rc_file.is_file():
            return int(rc_file.read_text())
        time.sleep(0.2)
    pytest.fail(f"recipe still running after {TIMEOUT_S} s\n{site.logs()}")


def test_dask_jobqueue_recipe(site: Site) -> None:
    """The driver script: SLURMCluster submits 2 jobs through sbatch, each one worker;
    ingest and report go through the CLI with ``--engine tcp://...``; the driver's
    ``cluster.close()`` cancels the jobs."""
    run = site.root / "run42"
    _kineto_ranks(run / "traces")
    code = _substitute(_code_block("## Slurm with dask-jobqueue (one worker per node)",
                                   "python"), [
        ("/lustre/proj/run42", str(run), 3),
        ("source /lustre/proj/venv/bin/activate", _activate(), 1),
        ('memory="200GB"', 'memory="2GB"', 1),
        ('interface="ib0"', 'interface="lo"', 1),
        ("cluster.scale(jobs=32)", f"cluster.scale(jobs={NODES})", 1),
        ("client.wait_for_workers(32)", f"client.wait_for_workers({NODES})", 1),
        # not a site's edit: the same engine also writes the JSON report, for the check
        ("cluster.close()",
         'subprocess.run(["traceatlas", "report", STORE, "--engine", address, "-f", "json"],'
         ' check=True, stdout=open("report.json", "w"))\ncluster.close()', 1),
    ])
    driver = site.root / "ingest_and_report.py"
    driver.write_text(code)
    proc = site.popen([sys.executable, str(driver)])
    rc = _wait(site, proc, None)
    assert rc == 0, site.logs()

    jobs = sorted(p.stem for p in site.spool.glob("*.job"))
    assert len(jobs) == NODES, jobs
    for job in jobs:  # the generated job script: our environment line, our interface
        script = (site.spool / f"{job}.job").read_text()
        assert _activate() in script and "--interface lo" in script, script
    cancelled = (site.spool / "scancel.log").read_text().split()
    assert sorted(cancelled) == jobs  # cluster.close() cancelled each job

    store = run / "run42.tastore"
    assert _ranks(site, store) == RANKS
    html, want = _local(site, store)
    assert (run / "report.html").read_bytes() == html
    got = json.loads((site.root / "report.json").read_text().splitlines()[-1])
    assert got == want


def test_scheduler_file_recipe(site: Site) -> None:
    """The batch script, submitted with sbatch: a scheduler and 2 workers through srun,
    then ingest, report and comm_matrix with ``TRACEATLAS_ENGINE=scheduler-file:...``
    on a 128-rank MPI trace (Paraver, point-to-point messages: a ring)."""
    run = site.root / "run42"
    (run / "traces").mkdir(parents=True)
    counts = write_mpi_trace(run / "traces" / "ring.prv", ranks=RANKS, iterations=3).counts
    script = _substitute(_code_block("## Slurm with a scheduler file (no dask-jobqueue)",
                                     "bash"), [
        ("source /lustre/proj/venv/bin/activate", _activate(), 1),
        ("/lustre/proj/run42", str(run), 5),
        ("--interface ib0", "--interface lo", 2),
        ("--memory-limit 200GB", "--memory-limit 2GB", 1),
        ("--nodes=32 --ntasks=32", f"--nodes={NODES} --ntasks={NODES}", 1),
        ("wait_for_workers(32", f"wait_for_workers({NODES}", 1),
    ])
    job = site.root / "traceatlas.sbatch"
    job.write_text(script)
    submitted = site.run(["sbatch", str(job)]).stdout
    job_id = re.fullmatch(r"Submitted batch job (\d+)\n", submitted)
    assert job_id is not None, submitted
    n = job_id.group(1)
    assert _wait(site, None, site.spool / f"{n}.rc") == 0, site.logs()

    srun = (site.spool / "srun.log").read_text().splitlines()
    assert [line.split()[:3] for line in srun] == [["1", "dask", "scheduler"],
                                                  [str(NODES), "dask", "worker"]]
    store = run / "run42.tastore"
    assert _ranks(site, store) == RANKS
    html, want = _local(site, store)
    assert (run / "report.html").read_bytes() == html
    # the job's scheduler and workers outlive its script until the job is cancelled
    sched = run / f"scheduler-{n}.json"
    got = site.run(["traceatlas", "report", str(store), "-f", "json", "--engine",
                    f"scheduler-file:{sched}"]).stdout
    assert json.loads(got.splitlines()[-1]) == want
    local_csv = site.run(["traceatlas", "analyze", "comm_matrix", str(store), "-f", "csv",
                          "--engine", "local"]).stdout
    assert (run / "comm_matrix.csv").read_text() == local_csv
    # the ring: every rank sends to the next one, once per iteration
    assert len(local_csv.splitlines()) == 1 + RANKS
    assert counts["messages"] == RANKS * 3
    site.run(["scancel", n])

"""``traceatlas record`` without torch: options, rank and launcher detection, the output
directory, the sitecustomize chain, exit codes, ``--nsys``. The runs with the PyTorch
profiler are in ``tests/e2e/test_record_torch.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traceatlas.errors import InputError
from traceatlas.record import hook, options, outdir

CLI = str(Path(sys.executable).parent / "traceatlas")
PY = sys.executable


def _record(*args: str, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "record", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


# -- options ------------------------------------------------------------------------------

def test_parse_ranks() -> None:
    assert options.parse_ranks("all") is None
    assert options.parse_ranks("0,3") == (0, 3)
    assert options.parse_ranks("5, 0-2") == (0, 1, 2, 5)
    for bad in ("x", "3-1", "1,,2", "-1"):
        with pytest.raises(ValueError):
            options.parse_ranks(bad)


def test_hook_environment_prepends_the_hook(tmp_path: Path) -> None:
    opts = options.RecordOptions(steps=4, wait=2, warmup=0, ranks=(1,))
    env = options.hook_environment({"PYTHONPATH": "/a:/b", "X": "1"}, tmp_path / "h",
                                   tmp_path / "out", opts)
    assert env["PYTHONPATH"] == f"{tmp_path / 'h'}{os.pathsep}/a:/b"
    assert env["X"] == "1"
    config = json.loads(env[hook.ENV])
    assert (config["steps"], config["wait"], config["warmup"], config["ranks"]) == (4, 2, 0, [1])
    assert config["dir"] == str(tmp_path / "out")
    assert options.hook_environment({}, tmp_path, tmp_path, opts)["PYTHONPATH"] == str(tmp_path)


@pytest.mark.parametrize(("env", "expected"), [
    ({}, (0, None)),
    ({"LOCAL_RANK": "1", "RANK": "5"}, (5, "RANK")),
    ({"SLURM_PROCID": "2", "LOCAL_RANK": "0"}, (2, "SLURM_PROCID")),
    ({"OMPI_COMM_WORLD_RANK": "3", "SLURM_PROCID": "0"}, (3, "OMPI_COMM_WORLD_RANK")),
    ({"PMI_RANK": "7"}, (7, "PMI_RANK")),
    ({"RANK": "", "LOCAL_RANK": "4"}, (4, "LOCAL_RANK")),
    ({"RANK": "x"}, (0, None)),
])
def test_rank_from_the_launchers_environment(env: dict[str, str],
                                             expected: tuple[int, str | None]) -> None:
    assert hook.rank_from_env(env) == expected


@pytest.mark.parametrize(("argv", "skip"), [
    (["python", "train.py"], False),
    (["python", "-u", "train.py", "--lr", "1"], False),
    (["python", "-W", "ignore", "train.py"], False),
    (["python", "-m", "mypkg.train"], False),
    (["python", "/venv/bin/torchrun", "--nproc-per-node", "2", "train.py"], True),
    (["python", "-m", "torch.distributed.run", "train.py"], True),
    (["python", "-mtorch.distributed.launch", "train.py"], True),
    (["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(3)",
      "--multiprocessing-fork"], True),
    (["python", "-c", "from multiprocessing.forkserver import main; main(3)"], True),
    (["python", "-c", "import torch"], False),
])
def test_launchers_and_helpers_are_not_recorded(argv: list[str], skip: bool) -> None:
    assert hook.is_launcher_or_helper(argv) is skip


# -- the output directory -----------------------------------------------------------------

def test_prepare_creates_or_accepts_an_empty_directory(tmp_path: Path) -> None:
    outdir.prepare(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()
    outdir.prepare(tmp_path / "a" / "b")  # empty: fine


def test_prepare_refuses_what_record_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a traceatlas record output"):
        outdir.prepare(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        outdir.prepare(tmp_path / "file")


def test_prepare_clears_a_previous_record_output_only(tmp_path: Path) -> None:
    outdir.write_marker(tmp_path, {"status": "done"})
    for name in ("rank-0.json.gz", "rank-12.json.gz", "report.html", ".rank-0.claim"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / ".tmp-rank-0-123").mkdir()
    outdir.prepare(tmp_path)
    assert list(tmp_path.iterdir()) == []

    outdir.write_marker(tmp_path, {"status": "done"})
    (tmp_path / "rank-0.json.gz").write_bytes(b"x")
    (tmp_path / "train.py").write_text("mine")
    with pytest.raises(InputError, match=r"also holds train\.py"):
        outdir.prepare(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".traceatlas-record", "rank-0.json.gz", "train.py"]


def test_a_marker_written_by_someone_else_is_not_ours(tmp_path: Path) -> None:
    (tmp_path / outdir.MARKER).write_text(json.dumps({"kind": "record"}))
    (tmp_path / "rank-0.json.gz").write_bytes(b"x")
    with pytest.raises(InputError):
        outdir.prepare(tmp_path)
    assert (tmp_path / "rank-0.json.gz").exists()


def test_traces_are_listed_by_rank_number(tmp_path: Path) -> None:
    for r in (10, 2, 0):
        (tmp_path / f"rank-{r}.json.gz").write_bytes(b"x")
    (tmp_path / "rank-x.json.gz").write_bytes(b"x")
    assert [p.name for p in outdir.traces(tmp_path)] == [
        "rank-0.json.gz", "rank-2.json.gz", "rank-10.json.gz"]


# -- the command, with programs that do not use torch ------------------------------------

def test_the_original_sitecustomize_still_runs(tmp_path: Path) -> None:
    """The hook is found first on PYTHONPATH, then imports the user's own sitecustomize;
    the program then sees its own sys.path (no hook directory) and its sitecustomize."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text(
        "import os\nopen(os.environ['MARK'], 'w').write('ran')\n")
    probe = ("import json, sys, sitecustomize; json.dump({'path': sys.path, "
             "'site': sitecustomize.__file__}, open(sys.argv[1], 'w'))")
    env = {**os.environ, "PYTHONPATH": str(mine), "MARK": str(tmp_path / "mark")}
    done = _record("-o", str(tmp_path / "out"), "--no-report", "--", PY, "-c", probe,
                   str(tmp_path / "probe.json"), env=env)
    assert (tmp_path / "mark").read_text() == "ran"
    seen = json.loads((tmp_path / "probe.json").read_text())
    assert seen["site"] == str(mine / "sitecustomize.py")
    assert str(mine) in seen["path"]
    assert not any("traceatlas-record-" in p for p in seen["path"])
    # the program never imported torch: nothing recorded, said, exit 1
    assert done.returncode == 1, done.stderr
    assert "nothing recorded" in done.stderr


def test_the_programs_exit_code_is_passed_through(tmp_path: Path) -> None:
    done = _record("-o", str(tmp_path / "out"), "--", PY, "-c", "raise SystemExit(7)")
    assert done.returncode == 7
    assert "exited with code 7" in done.stderr
    marker = json.loads((tmp_path / "out" / outdir.MARKER).read_text())
    assert (marker["exit_code"], marker["status"]) == (7, "done")


def test_a_foreign_output_directory_is_refused_before_the_program_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "data.csv").write_text("a,b\n")
    ran = tmp_path / "ran"
    done = _record("-o", str(out), "--", PY, "-c", f"open({str(ran)!r}, 'w')")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not a traceatlas record output" in done.stderr
    assert not ran.exists() and sorted(p.name for p in out.iterdir()) == ["data.csv"]


def test_a_missing_program_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _record("-o", str(tmp_path / "out"), "--", "no-such-program-xyz")
    assert done.returncode == 2
    assert "no-such-program-xyz: no such program" in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_ranks_are_refused(tmp_path: Path) -> None:
    done = _record("--ranks", "0,x", "-o", str(tmp_path / "out"), "--", PY, "-c", "")
    assert done.returncode == 2 and "--ranks" in done.stderr
    assert not (tmp_path / "out").exists()


def test_nsys_not_on_path_is_said_and_nothing_runs(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    env = {**os.environ, "PATH": str(tmp_path)}  # no nsys there
    done = _record("--nsys", "-o", str(tmp_path / "out"), "--", PY, "-c",
                   f"open({str(ran)!r}, 'w')", env=env)
    assert done.returncode == 2
    assert "nsys is not on PATH" in done.stderr
    assert not ran.exists() and not (tmp_path / "out").exists()


def test_nsys_gets_the_command_as_a_list(tmp_path: Path) -> None:
    """A stand-in ``nsys`` records its argv and writes the SQLite export it was asked
    for; arguments with spaces and quotes arrive unchanged (no shell)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(
        f"#!{PY}\nimport json, sys\n"
        f"json.dump(sys.argv[1:], open({str(tmp_path / 'argv.json')!r}, 'w'))\n"
        "out = [a for a in sys.argv if a.startswith('--output=')][0][len('--output='):]\n"
        "open(out + '.sqlite', 'wb').close()\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "out"
    done = _record("--nsys", "--no-report", "-o", str(out), "--", PY, "train.py",
                   "a b", "it's", env=env)
    assert done.returncode == 0, done.stderr
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == ["profile", f"--output={out / 'report'}", "--export=sqlite",
                    "--force-overwrite=true", PY, "train.py", "a b", "it's"]
    assert "recorded 1 trace(s)" in done.stderr and (out / "report.sqlite").exists()

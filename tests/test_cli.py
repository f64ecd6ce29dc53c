import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ctpipe.cli import main
from tests.conftest import T0, trace, write_traces


def test_materialize_prints_the_counts(settings, capsys):
    write_traces(settings.traces_dir, [trace(1), "{broken"])
    assert main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00"]) == 0
    out = capsys.readouterr().out
    assert "traces in 2 = 1 rows + 1 quarantined {\"invalid_json\": 1}" in out and "1 GRPO prompts" in out
    assert main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["traces_in"], out["rows"]["traces"], out["quarantined"], out["quarantine_reasons"]) == (2, 1, 1, {"invalid_json": 1})
    assert out["found"] is True  # the first run built it: the same files make the same version, found
    write_traces(settings.traces_dir, [trace(1), trace(2)])
    assert main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["found"] is False
    assert main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00"]) == 0
    assert "(found: built before from these very files)" in capsys.readouterr().out


def test_materialize_reads_and_publishes_where_the_dag_does(settings, capsys, monkeypatch, tmp_path):
    """Without --source and --out: trace_source and dataset_store, as trace_to_dataset reads and publishes."""
    write_traces(tmp_path / "elsewhere", [trace(1), trace(2)])
    monkeypatch.setenv("CTPIPE_TRACE_SOURCE", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("CTPIPE_DATASET_STORE", str(tmp_path / "store"))
    assert main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["traces_in"] == 2 and out["uri"].startswith(str(tmp_path / "store"))


def test_bad_input_is_a_message_not_a_traceback(settings, capsys, monkeypatch):
    with pytest.raises(SystemExit):
        main(["materialize", "--start", "2026-11-22T10:00:00", "--end", "2026-11-22T11:00:00+00:00"])
    assert "has no timezone" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["materialize", "--start", "yesterday", "--end", "2026-11-22T11:00:00+00:00"])
    assert "--start: 'yesterday' is not an ISO 8601 time" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["materialize", "--start", "2026-11-22T11:00:00+00:00", "--end", T0.isoformat()])
    err = capsys.readouterr().err  # with the usage of materialize, as argparse's own errors
    assert "usage: ctpipe materialize" in err and "ctpipe materialize: error: --end 2026-11-22T10:00:00+00:00 is not after --start" in err
    for every in ("", "infh", "1e20d", "1s", "-1h"):
        with pytest.raises(SystemExit):
            main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00", "--every", every])
        err = capsys.readouterr().err
        assert "--every" in err and "Traceback" not in err, every
    with pytest.raises(SystemExit):
        main(["materialize", "--start", "9999-12-31T20:00:00-05:00", "--end", "9999-12-31T23:00:00-05:00"])
    assert "'9999-12-31T20:00:00-05:00' is outside the years 1 to 9999 in UTC" in capsys.readouterr().err
    monkeypatch.setenv("CTPIPE_GATE__ALPHA", "3")
    assert main(["build-base"]) == 1
    assert "gate.alpha" in capsys.readouterr().err


def test_an_empty_source_or_out_is_refused_not_the_configured_store(settings, capsys):
    for flag in ("--source", "--out"):
        with pytest.raises(SystemExit):
            main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00", flag, " "])
        assert f"ctpipe materialize: error: {flag} is empty" in capsys.readouterr().err
    assert not settings.datasets_dir.exists()


def test_an_interval_not_ended_or_within_its_arrival_lag_is_not_built(settings, capsys, monkeypatch):
    """The command's clock is the one that reads: no minute of skew, as a scheduler's run has. With an
    arrival lag the DAG waits it out after the interval's end, and the command refuses until then."""
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc).replace(microsecond=0)
    soon = ["materialize", "--start", (now - timedelta(hours=1)).isoformat(), "--end", (now + timedelta(seconds=45)).isoformat()]
    assert main(soon) == 2 and "has not come yet" in capsys.readouterr().err
    monkeypatch.setenv("CTPIPE_DATASET__ARRIVAL_LAG", "PT15M")
    ended = ["materialize", "--start", (now - timedelta(hours=1)).isoformat(), "--end", (now - timedelta(minutes=1)).isoformat()]
    assert main(ended) == 2
    assert "and the arrival lag of 0:15:00 after it" in capsys.readouterr().err and not settings.datasets_dir.exists()


def test_a_backfill_that_fails_names_the_interval_and_what_is_left(settings, capsys, monkeypatch, tmp_path):
    write_traces(settings.traces_dir, [trace(1)])
    monkeypatch.setenv("CTPIPE_DATASET__EVAL_SETS", json.dumps([str(tmp_path / "gone.jsonl")]))
    argv = ["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T13:00:00+00:00", "--every", "1h"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("ctpipe materialize: [2026-11-22T10:00:00+00:00, 2026-11-22T11:00:00+00:00) failed: ")
    assert "gone.jsonl" in err and "[2026-11-22T11:00:00+00:00, 2026-11-22T13:00:00+00:00) not built" in err
    assert main([*argv, "--json"]) == 1
    said = json.loads(capsys.readouterr().out)
    assert (said["start"], said["end"]) == ("2026-11-22T10:00:00+00:00", "2026-11-22T11:00:00+00:00") and "gone.jsonl" in said["error"]
    # One interval says so too, where a script reads the versions (it printed nothing there).
    assert main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00", "--json"]) == 1
    out, err = capsys.readouterr()
    assert "gone.jsonl" in json.loads(out)["error"] and "gone.jsonl" in err


def test_an_interrupted_backfill_says_where_it_stopped(settings, capsys, monkeypatch):
    import ctpipe.materialize

    built = []

    def materialize(source, out, start, end, **config):
        if built:
            raise KeyboardInterrupt
        built.append(start)
        return real(source, out, start, end, **config)

    real = ctpipe.materialize.materialize
    monkeypatch.setattr(ctpipe.materialize, "materialize", materialize)
    write_traces(settings.traces_dir, [trace(1)])
    argv = ["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T13:00:00+00:00", "--every", "1h"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert ("ctpipe materialize: [2026-11-22T11:00:00+00:00, 2026-11-22T12:00:00+00:00) stopped; "
            "[2026-11-22T12:00:00+00:00, 2026-11-22T13:00:00+00:00) not built") in err
    assert err.rstrip().endswith("ctpipe materialize: interrupted")


def test_an_out_that_is_a_file_is_named(settings, capsys, tmp_path):
    write_traces(settings.traces_dir, [trace(1)])
    (tmp_path / "afile").write_text("x")
    assert main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00",
                 "--out", str(tmp_path / "afile")]) == 1
    assert f"dataset store '{tmp_path / 'afile'}' is a file, not a folder" in capsys.readouterr().err
    # A store that cannot be written is named as given, not by the hidden folder a run stages in.
    assert main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00",
                 "--out", "/proc/ctpipe-store"]) == 1
    assert "dataset store '/proc/ctpipe-store' cannot be written: " in capsys.readouterr().err
    assert main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00", "--out", "foo://x"]) == 1
    assert "dataset store 'foo://x': Protocol not known: foo" in capsys.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_mid_run_is_a_message_and_leaves_nothing_behind(settings, capsys, monkeypatch, tmp_path, signum):
    """SIGTERM is what timeout, systemd and Kubernetes send: the run cleans up as for Ctrl-C."""
    from ctpipe import materialize

    write_traces(settings.traces_dir, [trace(i) for i in range(1, 50)])
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    rows = materialize._rows

    def interrupted(*a, **k):
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler raises here
        return rows(*a, **k)

    monkeypatch.setattr(materialize, "_rows", interrupted)
    code = main(["materialize", "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00", "--out", str(tmp_path / "out")])
    assert code == 128 + signum
    err = capsys.readouterr().err
    assert err.strip().endswith("terminated" if signum == signal.SIGTERM else "interrupted") and "Traceback" not in err
    assert os.listdir(tmp_path / "out") == [] and os.listdir(tmp_path / "tmp") == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_terminal_s_ctrl_c_reaches_the_workers_too_and_none_prints_a_traceback(tmp_path):
    """A terminal sends Ctrl-C to its whole process group: workers still importing (or waiting for a
    task) printed tracebacks of their own above the command's one line."""
    write_traces(tmp_path / "src", [trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(30_000)])  # > 8 MB: workers
    command = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); " \
              "from ctpipe.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.Popen([sys.executable, "-c", command, "materialize", "--source", str(tmp_path / "src"),
                          "--out", str(tmp_path / "out"), "--start", T0.isoformat(), "--end", "2026-11-22T11:00:00+00:00"],
                         env={**os.environ, "CTPIPE_DATASET__WORKERS": "2"}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)

    def importing(child: str) -> bool:  # a worker's Python is up: it reads what it imports
        try:
            return b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes() and \
                b"libarrow" in Path(f"/proc/{child}/maps").read_bytes()
        except OSError:
            return False

    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline and \
            sum(map(importing, Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split())) < 2:
        time.sleep(0.005)
    os.killpg(p.pid, signal.SIGINT)  # as a terminal does
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err.decode()
    assert b"Traceback" not in err and err.decode().rstrip().endswith("ctpipe materialize: interrupted")
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_a_ctrl_c_while_the_command_loads_is_its_one_line_too():
    """The ``ctpipe`` command loads its modules (pydantic's among them) before its own handling begins:
    a Ctrl-C then printed Python's traceback."""
    import tomllib

    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["ctpipe"] == "ctpipe.__main__:main"
    loading = "import builtins, sys\nreal = builtins.__import__\n" \
              "def load(name, *a, **k):\n    if name == 'pydantic':\n        raise KeyboardInterrupt\n    return real(name, *a, **k)\n" \
              "builtins.__import__ = load\nfrom ctpipe.__main__ import main\nsys.exit(main())"
    done = subprocess.run([sys.executable, "-c", loading, "materialize", "--help"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (130, "ctpipe: interrupted\n", "")
    done = subprocess.run([sys.executable, "-m", "ctpipe", "k8s", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "render" in done.stdout


def test_sigterm_interrupts_the_work_within_and_only_there():
    """As the CLI's commands, so trace_to_dataset's task: Airflow's task runner, when a task is marked
    failed, only calls on_kill and lets it go on publishing."""
    from ctpipe.errors import Terminated, sigterm_interrupts

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated, match=r"^SIGTERM \(the task marked failed .*nothing more is published$"):
        with sigterm_interrupts():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted at once
    assert signal.getsignal(signal.SIGTERM) is before


def test_up_stops_the_airflow_it_started_when_ray_does_not_start(monkeypatch, tmp_path, capsys):
    """It left Airflow running, its pid file in place, and printed Ray's traceback."""
    from ctpipe import airflow_local, raycluster

    calls = []

    class Airflow:
        def __init__(self, settings):
            pass

        def start(self):
            calls.append("start")

        def stop(self):
            calls.append("stop")
            return True

    def no_ray(settings):
        raise RuntimeError("`ray start --head` failed (1): port 6380 is taken")

    monkeypatch.setenv("CTPIPE_HOME", str(tmp_path))
    monkeypatch.setattr(airflow_local, "LocalAirflow", Airflow)
    monkeypatch.setattr(raycluster, "ensure_local_head", no_ray)
    assert main(["up"]) == 1
    assert calls == ["start", "stop"] and "ray start --head` failed" in capsys.readouterr().err

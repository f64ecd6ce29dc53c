import json

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


def test_bad_input_is_a_message_not_a_traceback(settings, capsys, monkeypatch):
    with pytest.raises(SystemExit):
        main(["materialize", "--start", "2026-11-22T10:00:00", "--end", "2026-11-22T11:00:00+00:00"])
    assert "has no timezone" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["materialize", "--start", "yesterday", "--end", "2026-11-22T11:00:00+00:00"])
    assert "--start: 'yesterday' is not an ISO 8601 time" in capsys.readouterr().err
    assert main(["materialize", "--start", "2026-11-22T11:00:00+00:00", "--end", T0.isoformat()]) == 1
    err = capsys.readouterr().err
    assert "is not after start" in err and "Traceback" not in err
    monkeypatch.setenv("CTPIPE_GATE__ALPHA", "3")
    assert main(["build-base"]) == 1
    assert "gate.alpha" in capsys.readouterr().err

import os

import pytest

from adloader import cli
from adloader.daemon.ops.settings import ensure_token, is_loopback


def test_token_file_is_created_0600_and_reused(tmp_path):
    path = tmp_path / "state" / "token"
    token, existed = ensure_token(path)
    assert not existed and len(token) > 20
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert ensure_token(path) == (token, True)


@pytest.mark.processes  # --port 0: a socket finds the free port
def test_a_token_readable_by_others_is_refused(tmp_path, capsys):
    path = tmp_path / "token"
    path.write_text("secret\n")
    os.chmod(path, 0o644)
    code = cli.main(["daemon", "--state-dir", str(tmp_path), "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "chmod 600" in err and len(err.strip().splitlines()) == 1


def test_non_loopback_needs_a_provisioned_token(tmp_path, capsys):
    state = tmp_path / "state"
    code = cli.main(["daemon", "--host", "0.0.0.0", "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert code == 2 and "refusing to listen on 0.0.0.0" in err
    assert not (state / "token").exists()  # refusing does not provision one either
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def test_run_without_a_command_is_one_line(capsys):
    assert cli.main(["run"]) == 2
    assert "give the command after --" in capsys.readouterr().err


def test_an_unknown_policy_is_refused_before_the_daemon_starts():
    import pytest as _pytest

    from adloader.config import config_from
    from adloader.errors import InputError

    with _pytest.raises(InputError, match="unknown policy 'bogus'"):
        config_from({"policy": "bogus"}, environ={})
    with _pytest.raises(InputError, match="α must be in"):
        config_from({}, environ={"ADLOADER_POLICY": "fair:2"})
    assert config_from({"policy": "jct:0.9"}, environ={}).policy == "jct:0.9"


def test_malloc_arenas_are_capped_unless_the_operator_set_them(monkeypatch):
    """glibc's ``mallopt`` takes the cap (this machine's C library is glibc), and an
    operator's own MALLOC_ARENA_MAX is left to glibc, which read it at start."""
    from adloader.host.heap import cap_arenas

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert cap_arenas() is True
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert cap_arenas() is False

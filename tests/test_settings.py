"""One settings model: flags win over CONVMEM_* variables, which win over the TOML file,
which wins over the defaults; the CLI reads nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convmem.cli.main import main
from convmem.errors import InvalidInputError
from convmem.settings import load_settings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STORE", "EMBEDDER", "TENANT", "MARKER", "LOG_LEVEL", "CONFIG", "JSON_OUTPUT"):
        monkeypatch.delenv(f"CONVMEM_{name}", raising=False)


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "convmem.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_flags_win_over_env_over_file_over_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _config(tmp_path, 'tenant = "file"\nmarker = "keep-all"\nstore = "file.db"\n')
    monkeypatch.setenv("CONVMEM_TENANT", "env")
    monkeypatch.setenv("CONVMEM_STORE", "env.db")
    settings = load_settings({"tenant": "flag"}, config_file=path)
    assert settings.tenant == "flag"  # flag over env and file
    assert settings.store == "env.db"  # env over file
    assert settings.marker == "keep-all"  # file over default
    assert settings.log_level == "warning"  # default
    assert load_settings({}).tenant == "env"


def test_config_file_comes_from_convmem_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVMEM_CONFIG", str(_config(tmp_path, 'log_level = "debug"\n')))
    assert load_settings({}).log_level == "debug"


def test_unknown_key_in_the_file_is_named_with_the_known_ones(tmp_path: Path) -> None:
    path = _config(tmp_path, 'stroe = "x.db"\n')
    with pytest.raises(InvalidInputError, match=r"unknown key 'stroe'.*store") as info:
        load_settings({}, config_file=path)
    assert info.value.field == "stroe"


def test_a_missing_or_broken_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist; fix --config"):
        load_settings({}, config_file=tmp_path / "nope.toml")
    with pytest.raises(InvalidInputError, match="not valid TOML"):
        load_settings({}, config_file=_config(tmp_path, "store = \n"))


def test_a_bad_value_names_the_setting_and_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMEM_LOG_LEVEL", "loud")
    with pytest.raises(InvalidInputError, match="CONVMEM_LOG_LEVEL") as info:
        load_settings({})
    assert info.value.field == "log_level"


def test_the_cli_reads_its_store_from_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "from-config.db"
    path = _config(tmp_path, f'store = "{store}"\nembedder = "hashing"\ntenant = "acme"\n')
    assert main(["stats", "--config", str(path)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["tenant"] == "acme" and str(store) in stats["store"]
    monkeypatch.setenv("CONVMEM_TENANT", "env")
    assert main(["--config", str(path), "stats", "--tenant", "flag"]) == 0
    assert json.loads(capsys.readouterr().out)["tenant"] == "flag"
    assert main(["--config", str(tmp_path / "missing.toml"), "stats"]) == 2
    assert "fix --config" in capsys.readouterr().err


@pytest.mark.parametrize("tenant", ["", "x" * 101, "a\nb"])
def test_a_tenant_the_service_would_reject_is_refused_at_the_edge(tenant: str) -> None:
    with pytest.raises(InvalidInputError, match="'tenant'") as info:
        load_settings({"tenant": tenant})
    assert info.value.field == "tenant"


def test_config_and_policy_files_saved_with_a_byte_order_mark_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from convmem.governance import load_policy

    store = tmp_path / "bom.db"
    config = tmp_path / "bom.toml"
    config.write_bytes(f'\ufeffstore = "{store}"\nembedder = "hashing"\n'.encode())
    assert main(["stats", "--config", str(config)]) == 0
    assert str(store) in json.loads(capsys.readouterr().out)["store"]
    policy = tmp_path / "policy.json"
    policy.write_bytes('\ufeff{"rules": {"task(open)": {"ttl_seconds": 60}}}'.encode())
    assert load_policy(policy).rule("task(open)").ttl_seconds == 60
    # a file in another encoding is named, with the fix
    config.write_bytes(f'store = "{store}"\n# café\n'.encode("latin-1"))
    assert main(["stats", "--config", str(config)]) == 2
    assert "is not UTF-8" in capsys.readouterr().err
    policy.write_bytes(b'{"rules": {}} ' + "é".encode("latin-1"))
    with pytest.raises(InvalidInputError) as caught:
        load_policy(policy)
    assert caught.value.field == "policy" and "save it as UTF-8" in str(caught.value)

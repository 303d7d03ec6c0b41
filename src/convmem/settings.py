"""Settings of the command line and the service, built at the edge (never by the library).

One model, four layers, highest first: command-line flags, ``CONVMEM_*`` environment
variables, an optional TOML file (``--config PATH`` or ``CONVMEM_CONFIG``), then defaults.
The file holds top-level keys named like the fields below::

    store = "sqlite:////var/lib/convmem/memory.db"
    embedder = "hashing"
    tenant = "acme"
    log_level = "info"
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from convmem.errors import InvalidInputError
from convmem.text import read_utf8

__all__ = ["LOG_LEVELS", "Settings", "load_settings"]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


class Settings(BaseSettings):
    """Everything the CLI and ``convmem serve`` read from outside the code."""

    model_config = SettingsConfigDict(env_prefix="CONVMEM_", extra="forbid")

    store: str | None = Field(None, description="store URL or file; default: the user data dir")
    embedder: str | None = Field(None, description="embedder spec; default: the store's model")
    tenant: str = Field(
        "default",
        min_length=1,
        max_length=100,
        pattern=r"^[^\x00-\x1f]+$",
        description="the tenant commands act for (1-100 printable characters)",
    )
    marker: str = Field("rules", description="Stage 2 marker: rules, keep-all or llm")
    policy: str | None = Field(None, description="product retention policy JSON file")
    llm_url: str | None = Field(None, description="OpenAI-compatible base URL (marker llm)")
    llm_model: str | None = Field(None, description="model name (marker llm)")
    llm_key: str | None = Field(None, description="API key (marker llm)")
    admin_key: str | None = Field(None, description="admin key of the HTTP service")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "warning", description="logging level (serve: also the server's log level)"
    )
    json_output: bool = Field(False, description="machine-readable output, no progress bars")

    # The parsed TOML file of one load_settings call (set on a subclass made for that call).
    file_values: ClassVar[dict[str, Any]] = {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        file_values: dict[str, Any] = getattr(settings_cls, "file_values", {})
        return init_settings, env_settings, _DictSource(settings_cls, file_values)


class _DictSource(PydanticBaseSettingsSource):
    """The parsed TOML file, as the lowest-priority source."""

    def __init__(self, settings_cls: type[BaseSettings], values: Mapping[str, Any]) -> None:
        super().__init__(settings_cls)
        self._values = dict(values)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        values = tomllib.loads(read_utf8(path, field="--config", name=f"config file {str(path)!r}"))
    except FileNotFoundError:
        raise InvalidInputError(
            f"config file {str(path)!r} does not exist; fix --config or CONVMEM_CONFIG",
            field="--config",
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInputError(
            f"config file {str(path)!r} is not valid TOML ({exc}); fix the file", field="--config"
        ) from None
    known = set(Settings.model_fields)
    for key in values:
        if key not in known:
            raise InvalidInputError(
                f"config file {str(path)!r} has unknown key {key!r}; known keys: "
                + ", ".join(sorted(known)),
                field=key,
            )
    return values


def load_settings(
    flags: Mapping[str, Any] | None = None, *, config_file: str | Path | None = None
) -> Settings:
    """Merge flags (highest), ``CONVMEM_*`` variables, the TOML file and the defaults.

    Args:
        flags: the options given on the command line (absent ones left out, not None).
        config_file: a TOML file; default ``CONVMEM_CONFIG`` if set, else none.

    Raises:
        InvalidInputError: the file is missing, unreadable or has an unknown key, or a
            value is out of its domain; the message names the field.
    """
    path = config_file or os.environ.get("CONVMEM_CONFIG") or None
    file_values = _read_config_file(Path(path)) if path else {}
    with_file = type("Settings", (Settings,), {"file_values": file_values})
    try:
        settings: Settings = with_file(**dict(flags or {}))
        return settings
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"])
        raise InvalidInputError(
            f"setting {field!r}: {error['msg']} (got {error.get('input')!r}); fix the flag, "
            f"the CONVMEM_{field.upper()} variable or the config file",
            field=field,
        ) from None

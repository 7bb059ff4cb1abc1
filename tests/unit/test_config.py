"""Settings: read from ``ACTORMESH_*`` variables, checked where they are given."""

from __future__ import annotations

import pytest

from actormesh import Config


def test_settings_come_from_the_environment_with_their_types() -> None:
    config = Config.from_env(
        {
            "ACTORMESH_DEFAULT_TIMEOUT": "2.5",
            "ACTORMESH_MAX_HANDSHAKES": "7",
            "ACTORMESH_FORK_SERVER": "0",
            "ACTORMESH_SOCKET_DIR": "none",
            "ACTORMESH_REPLY_SPIN": "0",
        }
    )
    assert (config.default_timeout, config.max_handshakes, config.fork_server) == (2.5, 7, False)
    assert config.reply_spin == 0.0
    assert config.socket_dir is None
    assert Config.from_env({"ACTORMESH_DEFAULT_TIMEOUT": "none"}).default_timeout is None


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"default_timeout": -1}, ValueError, "default_timeout must be positive or None"),
        ({"default_timeout": 0}, ValueError, "default_timeout must be positive or None"),
        ({"spawn_timeout": "5"}, TypeError, "spawn_timeout must be a number, not '5'"),
        ({"max_handshakes": True}, TypeError, "max_handshakes must be a number"),
        ({"heartbeat_timeout": 0}, ValueError, "heartbeat_timeout must be positive"),
        ({"output": "loud"}, ValueError, "output must be 'prefix', 'raw' or 'off'"),
        ({"reply_spin": -1e-6}, ValueError, "reply_spin must be between 0 and 0.01 s"),
        ({"reply_spin": 1.0}, ValueError, "reply_spin must be between 0 and 0.01 s"),
    ],
)
def test_bad_settings_are_refused_with_their_names(
    changes: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Config(**changes)  # type: ignore[arg-type]

"""The Kafka profiles file (``primus/data/kafka.py``): a file that does not parse is refused
naming where, never quoting it (its lines may hold secrets)."""

from __future__ import annotations

import pytest

from primus.data.kafka import PROFILES_ENV, KafkaSourceError, load_profile


def test_a_profiles_file_that_is_no_yaml_is_refused_naming_the_line_not_quoting_it(
        tmp_path, monkeypatch):
    profiles = tmp_path / "kafka.yaml"
    profiles.write_text("clients:\n  prod:\n    sasl.password: [hunter2-secret\n")
    profiles.chmod(0o600)
    monkeypatch.setenv(PROFILES_ENV, str(profiles))

    with pytest.raises(KafkaSourceError) as refused:
        load_profile("prod")

    assert refused.value.field == "client"
    assert f"{profiles} is no valid YAML at line 4" in refused.value.reason, refused.value.reason
    assert "hunter2" not in str(refused.value)

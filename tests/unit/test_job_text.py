"""A job given as text (the API's SubmitApplication) loads exactly as the same job file does."""

from __future__ import annotations

import pytest

from primus.config.loader import MAX_CONFIG_BYTES, SpecError, load_job_spec, load_job_text

JOB = """\
name: train
workdir: work
files: [model.py]
roles:
  - name: worker
    num: 2
    command: python model.py
data:
  - name: train
    sources: [{path: "data/*.txt"}]
    roles: [worker]
"""


def test_job_text_loads_as_the_job_file_does_with_relative_paths_from_base_dir(tmp_path):
    (tmp_path / "job.yaml").write_text(JOB)
    from_file = load_job_spec(tmp_path / "job.yaml", overrides=["roles.worker.num=3"])
    from_text = load_job_text(JOB, "job.yaml", str(tmp_path), overrides=["roles.worker.num=3"])
    assert from_text == from_file


def test_job_text_without_base_dir_refuses_each_relative_path_naming_its_field():
    with pytest.raises(SpecError) as refused:
        load_job_text(JOB, "job.yaml", None)
    assert [str(p) for p in refused.value.problems] == [
        "job.yaml: workdir: got 'work'; must be an absolute path: there is no job file "
        "directory to take it from",
        "job.yaml: files[0]: got 'model.py'; must be an absolute path: there is no job file "
        "directory to take it from",
        "job.yaml: data[0].sources[0].path: got 'data/*.txt'; must be an absolute path: there "
        "is no job file directory to take it from"]


def test_job_text_past_the_bound_of_a_job_file_is_refused_naming_its_source():
    with pytest.raises(SpecError, match=r"^train.yaml: is 1,048,577 bytes; a job is at most"):
        load_job_text("#" * (MAX_CONFIG_BYTES + 1), "train.yaml", None)


def test_job_text_that_is_not_yaml_is_refused_as_a_job_file_would_be(tmp_path):
    (tmp_path / "bad.yaml").write_text("roles: [\n")
    with pytest.raises(SpecError) as from_file:
        load_job_spec(tmp_path / "bad.yaml")
    with pytest.raises(SpecError) as from_text:
        load_job_text("roles: [\n", str(tmp_path / "bad.yaml"), None)
    assert str(from_text.value) == str(from_file.value)

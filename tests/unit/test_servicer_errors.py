"""How the servicer turns the client layer's errors into status codes (pure mapping)."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2

from primus.api.servicer import RequestError, _Abort, _status_of
from primus.client.api import AppEndedError, AppNotFoundError
from primus.client.topology import ChangeConflictError, RoleNotFoundError, StreamNotFoundError
from primus.client.watch import RevisionAheadError
from primus.config.loader import SpecError, SpecProblem
from primus.errors import PrimusError
from primus.launcher.api import LaunchError
from primus.scheduler.placement import PlacementError
from primus.store.api import StoreUnavailableError


@pytest.mark.parametrize(("error", "code"), [
    (RequestError("page_size: got -1"), grpc.StatusCode.INVALID_ARGUMENT),
    (RevisionAheadError("after_revision: ahead"), grpc.StatusCode.INVALID_ARGUMENT),
    (AppNotFoundError("no application 'x'"), grpc.StatusCode.NOT_FOUND),
    (AppEndedError("x has ended"), grpc.StatusCode.FAILED_PRECONDITION),
    (PrimusError("x has no executor launched yet"), grpc.StatusCode.FAILED_PRECONDITION),
    (StoreUnavailableError("etcd unavailable"), grpc.StatusCode.UNAVAILABLE),
    (LaunchError("cannot read log"), grpc.StatusCode.UNAVAILABLE),
    (RoleNotFoundError("train-1 has no role 'chief'"), grpc.StatusCode.NOT_FOUND),
    (StreamNotFoundError("train-1 has no data stream 'eval'"), grpc.StatusCode.NOT_FOUND),
    (PlacementError("no host can take worker-3"), grpc.StatusCode.FAILED_PRECONDITION),
    (ChangeConflictError("train-1 kept changing"), grpc.StatusCode.ABORTED),
])
def test_each_client_layer_error_becomes_the_documented_status(error, code):
    with pytest.raises(_Abort) as aborted, _status_of("GetApplication"):
        raise error
    assert aborted.value.code is code
    assert aborted.value.message == str(error)


def test_a_refused_change_is_invalid_argument_with_a_bad_request_naming_the_field():
    error = SpecError(SpecProblem("role", "num", 0, "must be an integer >= 1"))
    with pytest.raises(_Abort) as aborted, _status_of("AddRole"):
        raise error
    assert aborted.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert aborted.value.message == "role: num: got 0; must be an integer >= 1"
    assert aborted.value.details is not None
    bad_request = error_details_pb2.BadRequest()
    assert aborted.value.details.details[0].Unpack(bad_request)
    assert [(v.field, v.description) for v in bad_request.field_violations] == [
        ("role.num", "got 0; must be an integer >= 1")]


def test_an_unexpected_error_is_internal_with_a_short_message_and_no_traceback(caplog):
    with pytest.raises(_Abort) as aborted, _status_of("GetApplication"):
        raise KeyError("secret detail")
    assert aborted.value.code is grpc.StatusCode.INTERNAL
    assert aborted.value.message == ("GetApplication failed: internal error (KeyError); "
                                     "see the server's log")
    assert "Traceback" not in aborted.value.message
    assert "secret detail" in caplog.text  # logged for the operator, with its traceback

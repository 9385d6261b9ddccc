"""How the servicer turns the client layer's errors into status codes (pure mapping)."""

from __future__ import annotations

import grpc
import pytest

from primus.api.servicer import RequestError, _Abort, _status_of
from primus.client.api import AppEndedError, AppNotFoundError
from primus.client.watch import RevisionAheadError
from primus.errors import PrimusError
from primus.launcher.api import LaunchError
from primus.store.api import StoreUnavailableError


@pytest.mark.parametrize(("error", "code"), [
    (RequestError("page_size: got -1"), grpc.StatusCode.INVALID_ARGUMENT),
    (RevisionAheadError("after_revision: ahead"), grpc.StatusCode.INVALID_ARGUMENT),
    (AppNotFoundError("no application 'x'"), grpc.StatusCode.NOT_FOUND),
    (AppEndedError("x has ended"), grpc.StatusCode.FAILED_PRECONDITION),
    (PrimusError("x has no executor launched yet"), grpc.StatusCode.FAILED_PRECONDITION),
    (StoreUnavailableError("etcd unavailable"), grpc.StatusCode.UNAVAILABLE),
    (LaunchError("cannot read log"), grpc.StatusCode.UNAVAILABLE),
])
def test_each_client_layer_error_becomes_the_documented_status(error, code):
    with pytest.raises(_Abort) as aborted, _status_of("GetApplication"):
        raise error
    assert aborted.value.code is code
    assert aborted.value.message == str(error)


def test_an_unexpected_error_is_internal_with_a_short_message_and_no_traceback(caplog):
    with pytest.raises(_Abort) as aborted, _status_of("GetApplication"):
        raise KeyError("secret detail")
    assert aborted.value.code is grpc.StatusCode.INTERNAL
    assert aborted.value.message == ("GetApplication failed: internal error (KeyError); "
                                     "see the server's log")
    assert "Traceback" not in aborted.value.message
    assert "secret detail" in caplog.text  # logged for the operator, with its traceback

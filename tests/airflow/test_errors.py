import pytest
from airflow.sdk.exceptions import AirflowFailException

from ctpipe.airflow.errors import fail_fast
from ctpipe.errors import PipelineError


def test_user_errors_fail_the_task_without_retries_and_keep_the_message():
    with pytest.raises(AirflowFailException, match="algorithm='ppo'"):
        with fail_fast():
            raise PipelineError("algorithm='ppo' is not supported")


def test_other_errors_pass_through_for_retries():
    with pytest.raises(ConnectionError):
        with fail_fast():
            raise ConnectionError("flaky")

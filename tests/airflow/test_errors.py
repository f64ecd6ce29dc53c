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


def test_a_skip_says_why_without_the_error_it_stands_for():
    from airflow.sdk.exceptions import AirflowSkipException

    from ctpipe.airflow.errors import skip
    from ctpipe.errors import NothingToPublish

    with pytest.raises(AirflowSkipException, match="nothing to publish: no traces") as e:
        try:
            raise NothingToPublish("no traces")
        except NothingToPublish as found:
            skip(f"nothing to publish: {found}")
    assert e.value.__suppress_context__

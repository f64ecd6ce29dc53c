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


def test_a_source_that_changed_while_read_is_retried_and_nothing_to_publish_passes():
    """A missing source or an unwritable store fails the materializer's task at once, saying why; a
    source that changed while it was read may read right on a retry; an empty interval is a skip."""
    from ctpipe.errors import NothingToPublish
    from ctpipe.sources import SourceChanged, SourceError

    with pytest.raises(AirflowFailException, match="does not exist"):
        with fail_fast():
            raise SourceError("source '/data/traces' does not exist")
    with pytest.raises(SourceChanged):
        with fail_fast():
            raise SourceChanged("a.jsonl changed while it was read")
    with pytest.raises(NothingToPublish):
        with fail_fast():
            raise NothingToPublish("no traces")

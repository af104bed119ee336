"""Admin and protocol gaps a new user meets (issue 16), each with a real client
against one `floe standalone` shared by the module: CreateTopics with replica
assignments, the `compression.type` topic config, OffsetCommit for topics that do
not exist, keyless records on a compacted topic."""

import pytest

from conftest import Standalone

pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def server(floe_bin, tmp_path_factory):
    s = Standalone(floe_bin, tmp_path_factory.mktemp("admin-gaps"))
    s.start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _log_tail_on_failure(request, server):
    # conftest's report hook adds these processes' log tails to a failure.
    request.node._floe_standalones = [server]


def admin(server):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": server.bootstrap})


def create(server, topics, timeout=30):
    """Creates the NewTopics and returns {name: exception or None}."""
    client = admin(server)  # kept alive until every answer is in
    futures = client.create_topics(topics, operation_timeout=timeout)
    out = {}
    for name, f in futures.items():
        try:
            f.result(timeout=timeout)
            out[name] = None
        except Exception as e:  # noqa: BLE001 - the KafkaException is the answer looked at
            out[name] = e
    return out


def error_name(e):
    return e.args[0].name() if e is not None else None


# ---------------------------------------------------------------- replica assignments

def test_create_topics_accepts_consistent_replica_assignments_and_refuses_others(server):
    from confluent_kafka.admin import NewTopic

    got = create(server, [
        # Broker ids Floe does not have: the placement is Floe's, the ids are ignored.
        # librdkafka wants the count beside the assignments, and sends -1 in its place.
        NewTopic("assigned", num_partitions=3, replica_assignment=[[1, 2], [2, 3], [3, 1]]),
        NewTopic("assigned-uneven", num_partitions=2, replica_assignment=[[1, 2], [1]]),
        NewTopic("assigned-twice", num_partitions=1, replica_assignment=[[1, 1]]),
    ])
    assert got["assigned"] is None, got["assigned"]
    assert error_name(got["assigned-uneven"]) == "INVALID_REPLICA_ASSIGNMENT"
    assert error_name(got["assigned-twice"]) == "INVALID_REPLICA_ASSIGNMENT"
    for name in ("assigned-uneven", "assigned-twice"):
        assert got[name].args[0].str(), f"{name}: no error message"
    md = admin(server).list_topics(timeout=10).topics
    assert len(md["assigned"].partitions) == 3
    assert "assigned-uneven" not in md and "assigned-twice" not in md

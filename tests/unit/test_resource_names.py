"""The resources JSON's optional PostgreSQL names: absent unless set, round-tripped, old JSON still read."""

from __future__ import annotations

import dataclasses
import json

from statestore.instance import ResourceNames

NAMES = ResourceNames.for_instance("main")
WITH_POSTGRES = dataclasses.replace(
    NAMES,
    postgres_host="statestore-main-postgres.proxy-abc.eu-west-2.rds.amazonaws.com",
    postgres_secret_arn="arn:aws:secretsmanager:eu-west-2:123456789012:secret:PostgresClusterSecret-AbCdEf",
)


def test_an_instance_without_the_database_has_no_postgres_names_and_writes_none() -> None:
    assert NAMES.postgres_host is None and NAMES.postgres_secret_arn is None
    written = json.loads(NAMES.to_json())
    assert not [key for key in written if key.startswith("postgres")]
    assert ResourceNames.from_json(NAMES.to_json()) == NAMES


def test_the_postgres_names_survive_a_json_round_trip() -> None:
    written = json.loads(WITH_POSTGRES.to_json())
    assert written["postgres_host"] == WITH_POSTGRES.postgres_host
    assert written["postgres_secret_arn"] == WITH_POSTGRES.postgres_secret_arn
    assert ResourceNames.from_json(WITH_POSTGRES.to_json()) == WITH_POSTGRES


def test_resources_json_written_before_the_postgres_names_still_reads() -> None:
    old = json.loads(WITH_POSTGRES.to_json())
    del old["postgres_host"], old["postgres_secret_arn"]
    assert ResourceNames.from_json(json.dumps(old)) == NAMES


def test_the_environment_carries_the_postgres_names_to_lambdas_and_jobs() -> None:
    environ = {"STATESTORE_RESOURCES": WITH_POSTGRES.to_json()}
    assert ResourceNames.from_environment(environ) == WITH_POSTGRES

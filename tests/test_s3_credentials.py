"""S3 credentials from the standard AWS chain, against moto: a profile of the shared
credentials file, and no credentials at all, which is an error at start (never
unsigned requests). `floe storage check` writes and reads back through each; what it
prints never shows a secret. (Web identity, container and instance-metadata
credentials are object_store's providers; its STS client speaks only HTTPS, so they
are not run against moto here.)"""

import os
import socket
import subprocess

import pytest

from s3_cluster import Moto

pytestmark = [pytest.mark.timeout(300)]

SECRET = "profile-Secret-Key-123"


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    m = Moto(tmp_path_factory.mktemp("moto") / "moto.log")
    yield m
    m.stop()


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def bare_env(tmp_path, **extra):
    """The environment without any AWS credential, and an instance-metadata
    endpoint that refuses connections (this machine is no EC2 instance)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = str(tmp_path)  # no ~/.aws
    env["AWS_METADATA_ENDPOINT"] = f"http://127.0.0.1:{closed_port()}"
    env.update(extra)
    return env


def check(floe_bin, store, env):
    return subprocess.run([str(floe_bin), "storage", "check", "--store", store], env=env, capture_output=True,
                          text=True, timeout=120)


def store_url(moto, bucket, extra=""):
    return f"s3://{bucket}?endpoint=http://127.0.0.1:{moto.port}&region=us-east-1&path_style=true{extra}"


def test_no_credentials_is_an_error_at_start_not_unsigned_requests(floe_bin, moto, tmp_path):
    res = check(floe_bin, store_url(moto, "no-creds"), bare_env(tmp_path))
    assert res.returncode != 0
    assert "no S3 credentials" in res.stderr, res.stderr
    assert "skip_signature=true" in res.stderr
    # Nothing was written: moto never saw the bucket.
    assert "no-creds" not in [b["Name"] for b in moto.client().list_buckets()["Buckets"]]


def test_a_profile_of_the_shared_credentials_file(floe_bin, moto, tmp_path):
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
                     f"[floe-ci]\naws_access_key_id = AKIAFLOECI\naws_secret_access_key = {SECRET}\n")
    env = bare_env(tmp_path, AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_PROFILE="floe-ci")
    res = check(floe_bin, store_url(moto, "from-profile"), env)
    assert res.returncode == 0, res.stderr
    assert "storage check passed" in res.stdout
    assert SECRET not in res.stdout + res.stderr


def test_keys_in_the_url_are_not_printed(floe_bin, moto, tmp_path):
    res = check(floe_bin, store_url(moto, "url-keys", f"&access_key_id=AKIAURL&secret_access_key={SECRET}"),
                bare_env(tmp_path))
    assert res.returncode == 0, res.stderr
    assert SECRET not in res.stdout + res.stderr

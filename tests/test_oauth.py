"""OAUTHBEARER with a real client: confluent-kafka's `oauth_cb` hands librdkafka a JWT
signed by a test RSA key; `floe standalone` checks it against a JWKS served over
HTTPS by a test identity provider (a Python server with its own CA). A good token
produces and consumes; an expired token, one signed by another key and one for
another audience are refused with SASL_AUTHENTICATION_FAILED, and the listener keeps
serving. The token's subject is the principal ACLs judge."""

import base64
import http.server
import json
import pathlib
import ssl
import threading
import time
import uuid

import pytest

from conftest import Standalone, port_of
from test_security import SERVER_EXT, confluent_fails, make_ca, make_cert

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

AUDIENCE = "floe-test"
ISSUER = "https://idp.floe.test"


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Key:
    """An RSA key, its JWK, and the RS256 tokens it signs."""

    def __init__(self, kid):
        from cryptography.hazmat.primitives.asymmetric import rsa
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        n = self.key.public_key().public_numbers()
        self.jwk = {"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
                    "n": b64(n.n.to_bytes((n.n.bit_length() + 7) // 8, "big")),
                    "e": b64(n.e.to_bytes(3, "big"))}

    def token(self, sub="carol", exp_in=600, aud=AUDIENCE, iss=ISSUER):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding
        now = int(time.time())
        head = b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": self.kid}).encode())
        body = b64(json.dumps({"sub": sub, "aud": aud, "iss": iss, "iat": now, "exp": now + exp_in}).encode())
        sig = self.key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{head}.{body}.{b64(sig)}", now + exp_in


class Idp:
    """A JWKS over HTTPS on 127.0.0.1, port 0, with a CA made by openssl."""

    def __init__(self, workdir, keys):
        self.jwks = json.dumps({"keys": [k.jwk for k in keys]}).encode()
        d = pathlib.Path(workdir)
        make_ca(d, "idp-ca")
        make_cert(d, "idp-ca", "idp", "/CN=idp", SERVER_EXT)
        self.ca = d / "idp-ca.pem"
        jwks = self.jwks

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(jwks)))
                self.end_headers()
                self.wfile.write(jwks)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(d / "idp.pem", d / "idp.key")
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


class OAuthStandalone(Standalone):
    def __init__(self, floe_bin, workdir, idp, **options):
        super().__init__(floe_bin, workdir, name="oauth", **options)
        self.idp = idp
        self.sasl_port = 0

    def args(self):
        return super().args() + [
            "--listeners", f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "--sasl-enabled-mechanisms", "OAUTHBEARER",
            "--sasl-oauthbearer-jwks-endpoint-url", self.idp.url,
            "--sasl-oauthbearer-jwks-cafile", str(self.idp.ca),
            "--sasl-oauthbearer-expected-audience", AUDIENCE,
            "--sasl-oauthbearer-expected-issuer", ISSUER,
            "--authorizer", "acl", "--super-users", "User:ANONYMOUS",
        ]

    def start(self):
        super().start()
        self.sasl_port = port_of(json.loads(self.ports_path.read_text())["kafka.sasl_plaintext"])
        return self


@pytest.fixture(scope="module")
def oauth(floe_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("oauth")
    good = Key("k1")
    idp = Idp(d, [good])
    s = OAuthStandalone(floe_bin, d, idp, connection_failed_authentication_delay_ms=50)
    s.start()
    yield s, good
    s.stop()
    idp.stop()


def conf(s, token_fn):
    return {"bootstrap.servers": f"127.0.0.1:{s.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": lambda _cfg: token_fn()}


def test_a_signed_token_produces_and_consumes_as_its_subject(oauth, floe_bin):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                       ResourcePatternType, ResourceType)
    s, key = oauth
    admin = AdminClient({"bootstrap.servers": s.bootstrap})  # User:ANONYMOUS, a super user here
    admin.create_topics([NewTopic("oauth-t", 1, 1)])["oauth-t"].result(30)
    fs = admin.create_acls([AclBinding(ResourceType.TOPIC, "oauth-t", ResourcePatternType.LITERAL, "User:carol",
                                       "*", AclOperation.ALL, AclPermissionType.ALLOW),
                            AclBinding(ResourceType.GROUP, "oauth-", ResourcePatternType.PREFIXED, "User:carol",
                                       "*", AclOperation.READ, AclPermissionType.ALLOW)], request_timeout=30)
    for f in fs.values():
        f.result()
    c = conf(s, lambda: key.token("carol"))
    p = Producer({**c, "acks": "all"})
    errors = []
    for i in range(10):
        p.produce("oauth-t", value=f"v{i}", on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors, errors
    cons = Consumer({**c, "group.id": f"oauth-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    cons.subscribe(["oauth-t"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    cons.close()
    assert len(got) == 10
    # dave's token is good, but no ACL names him.
    errors = []
    p = Producer({**conf(s, lambda: key.token("dave")), "acks": "all", "message.timeout.ms": 10000})
    p.produce("oauth-t", value=b"x", on_delivery=lambda e, m: e and errors.append(e.name()))
    p.flush(30)
    assert errors == ["TOPIC_AUTHORIZATION_FAILED"]


@pytest.mark.parametrize("case", ["expired", "other-key", "other-audience", "garbage"])
def test_bad_tokens_are_refused_and_the_listener_keeps_serving(oauth, case):
    s, key = oauth
    other = Key("k1")  # the same kid, another key
    token = {
        # librdkafka will not hand over a token it knows has expired: the JWT's
        # exp is past, the lifetime it is told is not.
        "expired": lambda: (key.token(exp_in=-300)[0], time.time() + 600),
        "other-key": lambda: other.token(),
        "other-audience": lambda: key.token(aud="someone-else"),
        "garbage": lambda: ("not.a.jwt", time.time() + 600),
    }[case]
    err = confluent_fails(conf(s, token), timeout=4)
    assert err, "a bad token was accepted"
    assert "SASL" in err or "uthentication" in err, err
    assert confluent_fails(conf(s, lambda: key.token())) == ""

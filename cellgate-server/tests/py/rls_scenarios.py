"""Envoy RLS v3 scenarios against a running cellgate-server, through grpcio.

Usage: rls_scenarios.py PROTO_ROOT GRPC_ADDR

PROTO_ROOT is envoy-types' `proto` directory (data-plane-api, xds, protoc-gen-validate, ...).
The stubs are generated here with grpcio-tools, so the client is the one grpc's own code
generator writes, not one from this repository. The server must run with the fixture config of
tests/server_python.rs, `--max-request-bytes 16384`, `--max-descriptors 8` and
LIMIT_RESPONSE_HEADERS_ENABLED=true. Prints one line per scenario; exits non-zero on the first
wrong answer.
"""

import os
import re
import sys
import tempfile

import grpc
from grpc_tools import protoc
import grpc_tools

ROOTS = ["data-plane-api", "xds", "protoc-gen-validate", "googleapis", "cel-spec",
         "client_model", "opentelemetry-proto"]


def generate(proto_root, out):
    """Generates Python modules for rls.proto and every file it imports, transitively."""
    includes = [os.path.join(proto_root, r) for r in ROOTS]
    includes = [d for d in includes if os.path.isdir(d)]
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    todo, seen = ["envoy/service/ratelimit/v3/rls.proto"], set()
    while todo:
        name = todo.pop()
        if name in seen or name.startswith("google/protobuf/"):
            continue
        seen.add(name)
        path = next((os.path.join(d, name) for d in includes
                     if os.path.isfile(os.path.join(d, name))), None)
        if path is None:
            raise SystemExit(f"proto not found: {name}")
        with open(path, encoding="utf-8") as f:
            todo.extend(re.findall(r'^import\s+(?:public\s+)?"([^"]+)";', f.read(), re.M))
    args = ["protoc", f"-I{well_known}"] + [f"-I{d}" for d in includes] + [
        f"--python_out={out}", f"--grpc_python_out={out}"] + sorted(seen)
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    sys.path.insert(0, out)


def main():
    proto_root, addr = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as out:
        generate(proto_root, out)
        run(addr)


def run(addr):
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
    from google.protobuf import wrappers_pb2

    OK = rls_pb2.RateLimitResponse.OK
    OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
    Unit = rls_pb2.RateLimitResponse.RateLimit.Unit

    # Over a Unix socket grpcio sends the socket's path as :authority, which the server's
    # HTTP/2 layer (h2) refuses as malformed; a host name, as Envoy sends, is accepted.
    options = [("grpc.default_authority", "localhost")] if addr.startswith("unix:") else []
    channel = grpc.insecure_channel(addr, options=options)
    grpc.channel_ready_future(channel).result(timeout=10)
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)

    def desc(*entries, limit=None, hits=None):
        d = ratelimit_pb2.RateLimitDescriptor(
            entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries])
        if limit is not None:
            d.limit.CopyFrom(ratelimit_pb2.RateLimitDescriptor.RateLimitOverride(
                requests_per_unit=limit[0], unit=limit[1]))
        if hits is not None:
            d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=hits))
        return d

    # Requests that reached the service's handler (all but one refused while decoding), for
    # the test to compare with /metrics' request count and response-time histogram.
    handled = [0]

    def ask(*descriptors, domain="shop", hits_addend=0):
        req = rls_pb2.RateLimitRequest(domain=domain, descriptors=list(descriptors),
                                       hits_addend=hits_addend)
        handled[0] += 1
        return stub.ShouldRateLimit(req, timeout=10)

    def refused(code, *descriptors, domain="shop"):
        try:
            ask(*descriptors, domain=domain)
        except grpc.RpcError as e:
            assert e.code() == code, (e.code(), e.details())
            return e.details()
        raise AssertionError(f"expected {code}")

    def check(name, cond, detail=""):
        assert cond, f"{name}: {detail}"

    # A plain limit: 3 a year, then over; statuses carry the limit and what is left.
    for want_left in (2, 1, 0):
        r = ask(desc(("remote_address", "10.0.0.1")))
        s = r.statuses[0]
        check("plain", r.overall_code == OK and s.code == OK and s.limit_remaining == want_left, r)
        check("plain limit", s.current_limit.requests_per_unit == 3
              and s.current_limit.unit == Unit.YEAR, r)
        check("plain reset", s.duration_until_reset.seconds > 0, r)
    r = ask(desc(("remote_address", "10.0.0.1")))
    check("plain over", r.overall_code == OVER and r.statuses[0].code == OVER, r)
    print("ok plain limit, then over")

    # Response headers (LIMIT_RESPONSE_HEADERS_ENABLED=true): the deciding limit's.
    headers = {h.key: h.value for h in r.response_headers_to_add}
    check("headers", headers.get("RateLimit-Limit") == "3"
          and headers.get("RateLimit-Remaining") == "0" and "RateLimit-Reset" in headers, r)
    print("ok response headers")

    # Wildcard value: "/api/*" matches a prefix; nested unlimited below it.
    for _ in range(2):
        check("wildcard", ask(desc(("path", "/api/a"))).overall_code == OK)
    r = ask(desc(("path", "/api/a")))
    check("wildcard over", r.overall_code == OVER and r.statuses[0].current_limit.name == "api", r)
    for _ in range(5):
        r = ask(desc(("path", "/api/a"), ("user", "bob")))
        check("nested unlimited", r.overall_code == OK
              and not r.statuses[0].HasField("current_limit"), r)
    print("ok wildcard, nested unlimited")

    # Shadow mode: over the limit but admitted.
    for _ in range(3):
        r = ask(desc(("path", "/shadow")))
        check("shadow", r.overall_code == OK, r)
    print("ok shadow mode")

    # replaces: the gold limit replaces the api limit for this request.
    r = ask(desc(("path", "/api/g")), desc(("tier", "gold")))
    check("replaces", r.overall_code == OK and r.statuses[1].current_limit.name == "gold"
          and not r.statuses[0].HasField("current_limit"), r)
    r = ask(desc(("path", "/api/g")), desc(("tier", "gold")))
    check("replaces over", r.overall_code == OVER and r.statuses[1].code == OVER, r)
    print("ok replaces")

    # A limit override in the request replaces the configured one.
    r = ask(desc(("remote_address", "10.0.0.9"), limit=(1, Unit.HOUR)))
    check("override", r.overall_code == OK and r.statuses[0].current_limit.requests_per_unit == 1
          and r.statuses[0].current_limit.unit == Unit.HOUR, r)
    r = ask(desc(("remote_address", "10.0.0.9"), limit=(1, Unit.HOUR)))
    check("override over", r.overall_code == OVER, r)
    print("ok override")

    # A descriptor hits_addend of 0 looks without charging.
    for want_left in (3, 3):
        r = ask(desc(("remote_address", "10.0.0.2"), hits=0))
        check("look", r.overall_code == OK and r.statuses[0].limit_remaining == want_left, r)
    r = ask(desc(("remote_address", "10.0.0.2")))
    check("charge", r.statuses[0].limit_remaining == 2, r)
    r = ask(desc(("remote_address", "10.0.0.2"), hits=0))
    check("look after", r.statuses[0].limit_remaining == 2, r)
    print("ok hits_addend 0 looks")

    # Request hits_addend: 5 units of a stock of 5, then nothing left.
    r = ask(desc(("item", "iphone")), hits_addend=5)
    check("stock", r.overall_code == OK and r.statuses[0].limit_remaining == 0, r)
    check("stock over", ask(desc(("item", "iphone"))).overall_code == OVER)
    print("ok hits_addend, stock")

    # All or nothing: a request refused by one descriptor charges none of the others.
    for _ in range(2):
        check("both", ask(desc(("remote_address", "10.0.0.4")),
                          desc(("path", "/api/q"))).overall_code == OK)
    r = ask(desc(("remote_address", "10.0.0.4")), desc(("path", "/api/q")))
    check("one over", r.overall_code == OVER and r.statuses[1].code == OVER, r)
    r = ask(desc(("remote_address", "10.0.0.4"), hits=0))
    check("not charged", r.statuses[0].limit_remaining == 1, r)
    print("ok all or nothing")

    # A limit of zero requests refuses every request that charges it, and charges nothing else.
    r = ask(desc(("ip", "banned")), desc(("remote_address", "10.0.0.7")))
    check("banned", r.overall_code == OVER and r.statuses[0].code == OVER
          and r.statuses[0].current_limit.requests_per_unit == 0
          and r.statuses[1].code == OK, r)
    r = ask(desc(("remote_address", "10.0.0.7"), hits=0))
    check("banned charged nothing", r.statuses[0].limit_remaining == 3, r)
    print("ok zero limit")

    # Quota mode: refused only when every quota descriptor is over; one over is reported.
    quotas = (desc(("quota", "free")), desc(("quota", "paid")))
    codes = []
    for _ in range(4):
        r = ask(*quotas)
        codes.append((r.overall_code, [s.code for s in r.statuses]))
    check("quota", codes == [(OK, [OK, OK]), (OK, [OVER, OK]), (OVER, [OVER, OVER]),
                             (OVER, [OVER, OVER])], codes)
    print("ok quota mode")

    # Bad inputs.
    refused(grpc.StatusCode.INVALID_ARGUMENT, desc(("a", "b")), domain="")
    refused(grpc.StatusCode.INVALID_ARGUMENT)
    refused(grpc.StatusCode.INVALID_ARGUMENT, *[desc(("k", str(i))) for i in range(9)])
    # tonic refuses a message over max_decoding_message_size with OUT_OF_RANGE.
    refused(grpc.StatusCode.OUT_OF_RANGE, desc(("remote_address", "x" * 20000)))
    handled[0] -= 1  # refused by tonic's decoder, before the handler
    r = ask(desc(("remote_address", "10.0.0.1")), domain="nobody")
    check("unknown domain", r.overall_code == OK and r.statuses[0].code == OK
          and not r.statuses[0].HasField("current_limit"), r)
    print("ok bad inputs")
    print(f"handled {handled[0]}")
    channel.close()


if __name__ == "__main__":
    main()

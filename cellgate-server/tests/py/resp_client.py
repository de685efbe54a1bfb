"""redis-py against cellgate-server's RESP listener.

usage: resp_client.py PORT PROTOCOL   (PROTOCOL 2 or 3; redis-py's default handshake for 3 is
HELLO 3, which it gives up on if refused). Prints "ok" and exits 0 when every check passes.
"""
import sys

import redis


def main():
    port, protocol = int(sys.argv[1]), int(sys.argv[2])
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol, client_name="py-test")
    assert r.ping() is True
    assert r.echo("hi") == b"hi"
    assert r.client_getname() in ("py-test", b"py-test"), r.client_getname()
    assert r.client_setname("other") is True
    assert isinstance(r.client_id(), int)
    key = "py:%d" % protocol
    first = r.execute_command("CL.THROTTLE", key, 4, 10, 60)
    assert first == [0, 5, 4, -1, 6], first
    # A pipeline: the rest of the burst, then limited.
    p = r.pipeline(transaction=False)
    for _ in range(5):
        p.execute_command("CL.THROTTLE", key, 4, 10, 60)
    replies = p.execute()
    assert [x[0] for x in replies] == [0, 0, 0, 0, 1], replies
    assert replies[-1][1:3] == [5, 0], replies
    assert replies[-1][3] in (5, 6), replies  # about one 6 s interval, truncated
    try:
        r.execute_command("CL.THROTTLE", key, 4, "x", 60)
        raise AssertionError("no error for a non-integer")
    except redis.ResponseError as e:
        assert str(e) == "Cell error: Couldn't parse as integer: x", str(e)
    try:
        r.execute_command("NOSUCH", "a")
        raise AssertionError("no error for an unknown command")
    except redis.ResponseError as e:
        assert str(e).startswith("unknown command 'NOSUCH'"), str(e)
    r.close()
    print("ok")


if __name__ == "__main__":
    main()

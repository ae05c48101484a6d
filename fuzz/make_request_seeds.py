#!/usr/bin/env python3
"""Writes the seed inputs of the request and HTTP fuzzers (fuzz/request_fuzzer.cc, http_fuzzer.cc).

Usage: make_request_seeds.py REQUEST_CORPUS HTTP_CORPUS

From the test requests in fuzz/request_seeds/{openai,messages,responses}/*.json (bodies the server
tests send): REQUEST_CORPUS gets each body behind its route's selector digit ('0' OpenAI, '1'
Messages, '2' count_tokens, '3' Responses, '4' chat); HTTP_CORPUS gets each body as a whole HTTP
request to its route (Content-Length or chunked, Expect: 100-continue, HTTP/1.0, pipelined), behind
the read-size byte (0: all at once), plus framing edge cases (bad and oversized lengths, both
framings at once, chunk extensions and trailers, long headers, percent-encoded targets). Existing
files are overwritten with the same bytes; other files in the corpora (what fuzzing found) stay.
"""
import pathlib
import sys

SEEDS = pathlib.Path(__file__).resolve().parent / "request_seeds"


def bodies():
    """(api, name, body bytes) for every seed body."""
    for f in sorted((SEEDS / "openai").glob("*.json")):
        yield "openai", f.stem, f.read_bytes().strip()
    for f in sorted((SEEDS / "messages").glob("*.json")):
        yield ("count_tokens" if f.stem == "count_tokens" else "messages"), f.stem, f.read_bytes().strip()
    for f in sorted((SEEDS / "responses").glob("*.json")):
        yield "responses", f.stem, f.read_bytes().strip()


SELECTOR = {"openai": b"0", "messages": b"1", "count_tokens": b"2", "responses": b"3"}


def path_of(api, body):
    if api == "openai":
        return "/v1/completions" if b'"prompt"' in body else "/v1/chat/completions"
    return {"messages": "/v1/messages", "count_tokens": "/v1/messages/count_tokens",
            "responses": "/v1/responses"}[api]


def request(path, body, *, version="1.1", chunked=False, expect=False, extra=b""):
    head = f"POST {path} HTTP/{version}\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    out = head.encode()
    if expect:
        out += b"Expect: 100-continue\r\n"
    out += extra
    if chunked:
        out += b"Transfer-Encoding: chunked\r\n\r\n"
        for i in range(0, len(body), 97):
            part = body[i:i + 97]
            out += b"%x\r\n" % len(part) + part + b"\r\n"
        return out + b"0\r\n\r\n"
    return out + b"Content-Length: %d\r\n\r\n" % len(body) + body


EDGES = {
    "get_health": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    "pct_query": b"POST /v1/chat%2Fcompletions?stream=1&model=a%20b HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: 2\r\n\r\n{}",
    "too_long_length": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Length: 99999999999\r\n\r\n{}",
    "expect_too_long": b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\n"
                       b"Content-Length: 1048576\r\n\r\n",
    "negative_length": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
    "two_lengths": b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "length_and_chunked": b"POST /v1/responses HTTP/1.1\r\nContent-Length: 4\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "chunk_ext_trailer": b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"1;ext=\"v\"\r\n{\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n",
    "chunk_overflow": b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"fffffffffffffffff\r\n{}\r\n0\r\n\r\n",
    "chunked_over_limit": b"POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                          + b"".join(b"1000\r\n" + b"a" * 4096 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n",
    "long_header": b"GET / HTTP/1.1\r\nX-Long: " + b"h" * 5000 + b"\r\n\r\n",
    "bare_lf": b"POST /v1/chat/completions HTTP/1.1\nContent-Length: 2\n\n{}",
    "http10_keepalive": b"POST /v1/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 14\r\n\r\n"
                        b"{\"prompt\":\"a\"}GET /health HTTP/1.0\r\n\r\n",
    "close_then_more": b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\nGET /health HTTP/1.1\r\n\r\n",
    "obs_fold": b"POST /v1/chat/completions HTTP/1.1\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\n{}",
    "garbage": b"\x00\xff\r\n\r\n",
}


def main():
    req_dir, http_dir = (pathlib.Path(p) for p in sys.argv[1:3])
    req_dir.mkdir(parents=True, exist_ok=True)
    http_dir.mkdir(parents=True, exist_ok=True)
    chats = []
    for api, name, body in bodies():
        (req_dir / f"{api}-{name}").write_bytes(SELECTOR[api] + body)
        path = path_of(api, body)
        if path.endswith("chat/completions"):
            chats.append(body)
            (req_dir / f"chat-{name}").write_bytes(b"4" + body)
        (http_dir / f"{api}-{name}").write_bytes(b"\0" + request(path, body))
        (http_dir / f"{api}-{name}-chunked").write_bytes(b"\x07" + request(path, body, chunked=True))
    first = next(iter(bodies()))
    path = path_of(first[0], first[2])
    (http_dir / "expect").write_bytes(b"\0" + request(path, first[2], expect=True))
    (http_dir / "http10").write_bytes(b"\0" + request(path, first[2], version="1.0"))
    (http_dir / "pipelined").write_bytes(
        b"\x05" + request(path, first[2]) + request("/v1/messages", (SEEDS / "messages" / "min.json").read_bytes().strip(),
                                                    chunked=True)
        + request("/v1/responses", (SEEDS / "responses" / "string.json").read_bytes().strip()))
    for name, raw in EDGES.items():
        (http_dir / f"edge-{name}").write_bytes(b"\0" + raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())

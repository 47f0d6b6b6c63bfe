#!/usr/bin/env python3
"""`deltainfer serve`, the OpenAI-compatible HTTP server, end to end.

usage: test_server.py DELTAINFER_BINARY MODEL_DIR [unittest arguments, e.g. AuthTests]

MODEL_DIR is a tiny random-weight Qwen3.5 checkpoint with the real tokenizer: its text is gibberish,
but greedy decoding (temperature 0) is deterministic, which the equality checks rely on. Servers
listen on loopback ports only, and every request, wait and load loop is bounded in count and time.
"""
import atexit
import http.client
import json
import os
import queue
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import openai

BINARY = None  # set by main()
MODEL_DIR = None
MODEL_NAME = "tiny"  # --served-model-name of the servers that set one
MAX_MODEL_LEN = 512
STARTUP_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
HTTP_TIMEOUT_S = 120
LISTENING = re.compile(r"deltainfer serve: listening on http://127\.0\.0\.1:(\d+)")

REQUIRED_METRICS = [
    "deltainfer_requests_total",
    "deltainfer_prompt_tokens_total",
    "deltainfer_generation_tokens_total",
    "deltainfer_time_to_first_token_seconds_bucket",
    "deltainfer_time_to_first_token_seconds_sum",
    "deltainfer_time_to_first_token_seconds_count",
    "deltainfer_time_per_output_token_seconds_bucket",
    "deltainfer_time_per_output_token_seconds_sum",
    "deltainfer_time_per_output_token_seconds_count",
    "deltainfer_requests_waiting",
    "deltainfer_requests_running",
    "deltainfer_kv_blocks_free",
    "deltainfer_kv_blocks_total",
    "deltainfer_state_slots_free",
    "deltainfer_state_slots_total",
]


def expect(condition, message):
    """An assertion that also works in client threads and under python -O."""
    if not condition:
        raise AssertionError(message)


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def default_model_name():
    # What the server names the model without --served-model-name: the directory's own name.
    return os.path.basename(os.path.abspath(MODEL_DIR))


# ---------------------------------------------------------------------------------------------
# Server processes

_live_processes = set()


@atexit.register
def _kill_leftovers():
    # An interrupted run must not leave servers behind.
    for proc in list(_live_processes):
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Server:
    """A `deltainfer serve` subprocess listening on a loopback port."""

    def __init__(self, proc, port, log, args):
        self.proc = proc
        self.port = port
        self.log = log
        self.args = args

    def alive(self):
        return self.proc.poll() is None

    def stderr_tail(self, limit=4000):
        # Read through a second descriptor: seeking the child's would move its write offset.
        with open(self.log.name, "rb") as f:
            data = f.read()
        return data[-limit:].decode("utf-8", "replace")


def _drain_lines(stream, lines):
    # Keeps reading after the listening line so that a chatty server never blocks on a full pipe.
    for raw in iter(stream.readline, b""):
        lines.put(raw.decode("utf-8", "replace"))
    lines.put(None)
    stream.close()


def start_server(*, max_num_seqs=8, max_queued=16, api_key=None, served_name=MODEL_NAME, extra=()):
    args = [BINARY, "serve", "--model", MODEL_DIR, "--device", "cpu", "--host", "127.0.0.1", "--port", "0",
            "--max-num-seqs", str(max_num_seqs), "--max-queued", str(max_queued),
            "--max-model-len", str(MAX_MODEL_LEN)]
    if api_key is not None:
        args += ["--api-key", api_key]
    if served_name is not None:
        args += ["--served-model-name", served_name]
    args += list(extra)
    log = tempfile.NamedTemporaryFile(prefix="deltainfer-serve-", suffix=".log")
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
    _live_processes.add(proc)
    server = Server(proc, None, log, args)
    lines = queue.Queue()
    threading.Thread(target=_drain_lines, args=(proc.stdout, lines), daemon=True).start()

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    failure = None
    while server.port is None and failure is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            failure = f"no listening line within {STARTUP_TIMEOUT_S} s"
            break
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        if line is None:
            failure = "stdout closed before the listening line"
        elif LISTENING.search(line):
            server.port = int(LISTENING.search(line).group(1))
    if failure is not None:
        if proc.poll() is None:
            proc.kill()
        status = proc.wait()
        _live_processes.discard(proc)
        tail = server.stderr_tail()
        log.close()
        raise AssertionError(f"{' '.join(args)}: {failure} (exit status {status}); stderr:\n{tail}")
    return server


def stop_server(server):
    """SIGTERM, then the exit status must be 0 within STOP_TIMEOUT_S."""
    try:
        if server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)
        try:
            status = server.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
            raise AssertionError(f"the server did not exit within {STOP_TIMEOUT_S} s of SIGTERM; stderr:\n"
                                 f"{server.stderr_tail()}")
        expect(status == 0, f"the server exited with status {status}; stderr:\n{server.stderr_tail()}")
    finally:
        _live_processes.discard(server.proc)
        server.log.close()


_main = {"server": None, "error": None}


def main_server():
    """The server most tests share, started on first use (a queue deep enough for the soak)."""
    if _main["error"] is not None:
        raise AssertionError(f"the main server failed to start: {_main['error']}")
    if _main["server"] is None:
        try:
            _main["server"] = start_server(max_num_seqs=8, max_queued=256)
        except AssertionError as e:
            _main["error"] = str(e)
            raise
    return _main["server"]


def tearDownModule():
    if _main["server"] is not None:
        server, _main["server"] = _main["server"], None
        stop_server(server)


# ---------------------------------------------------------------------------------------------
# HTTP

class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return f"HTTP {self.status}: {self.body[:300]!r}"


def request(port, method, path, body=None, headers=None, timeout=HTTP_TIMEOUT_S):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def get(port, path, headers=None):
    return request(port, "GET", path, headers=headers)


def post_raw(port, path, data, headers=None, timeout=HTTP_TIMEOUT_S):
    return request(port, "POST", path, data, {"Content-Type": "application/json", **(headers or {})}, timeout)


def post_json(port, path, obj, headers=None, timeout=HTTP_TIMEOUT_S):
    return post_raw(port, path, json.dumps(obj).encode("utf-8"), headers, timeout)


def complete(port, prompt, headers=None, **fields):
    """A greedy /v1/completions request unless fields say otherwise."""
    body = {"model": MODEL_NAME, "prompt": prompt, "temperature": 0, **fields}
    return post_json(port, "/v1/completions", body, headers)


def tokenize(port, text):
    reply = post_json(port, "/tokenize", {"prompt": text})
    expect(reply.status == 200, f"/tokenize: {reply}")
    return reply.json()


def sse_events(resp):
    """Yields the data of each server-sent event ("[DONE]" included) until the connection ends.

    Comment lines (keep-alives) are skipped; an event cut off before its blank line is dropped, as
    the SSE specification says, so a stream whose end is malformed shows up as missing events.
    """
    data = []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith(":"):
            continue
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)


class EventStream:
    """A streaming request in flight."""

    def __init__(self, port, path, body, headers=None, timeout=HTTP_TIMEOUT_S):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.conn.request("POST", path, body=json.dumps(body).encode("utf-8"),
                          headers={"Content-Type": "application/json", **(headers or {})})
        # Kept: http.client hands the socket to the response when the server says Connection: close.
        self.sock = self.conn.sock
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.content_type = self.response.getheader("Content-Type", "")
        self._events = sse_events(self.response)

    def next_event(self):
        return next(self._events, None)

    def rest(self):
        return list(self._events)

    def close(self, reset=False):
        """Disconnects: an orderly FIN, or with reset an RST as from a crashed client."""
        try:
            if reset:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.response.close()
        self.conn.close()
        self.sock.close()


def check_stream(events, object_name, max_tokens=None, include_usage=False):
    """Asserts that SSE data events form a well-formed stream; returns (text, finish_reason, usage)."""
    expect(events, "the stream has no events")
    expect(events[-1] == "[DONE]" and events.count("[DONE]") == 1,
           f"[DONE] is not the one last event: {events[-3:]}")
    chunks = []
    for data in events[:-1]:
        try:
            chunks.append(json.loads(data))
        except ValueError:
            raise AssertionError(f"an event is not JSON: {data!r}")
    expect(chunks, "no chunk before [DONE]")
    expect(len({c.get("id") for c in chunks}) == 1, "the chunks do not share one id")
    for c in chunks:
        expect(c.get("object") == object_name, f"chunk object {c.get('object')!r}, not {object_name!r}")
        expect(is_int(c.get("created")), f"chunk without an integer 'created': {c}")
        expect(isinstance(c.get("choices"), list), f"chunk without choices: {c}")
    finished = [i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0].get("finish_reason")]
    expect(len(finished) == 1, f"{len(finished)} chunks carry a finish_reason")
    last = chunks[finished[0]]
    finish_reason = last["choices"][0]["finish_reason"]
    expect(finish_reason in ("stop", "length"), f"finish_reason {finish_reason!r}")
    usage = last.get("usage")
    expect(isinstance(usage, dict), f"the finishing chunk has no usage: {last}")
    expect(all(is_int(usage.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens")),
           f"usage {usage}")
    expect(usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], f"usage {usage}")
    if max_tokens is not None:
        expect(finish_reason == "length" and usage["completion_tokens"] == max_tokens,
               f"with ignore_eos and max_tokens {max_tokens}: {finish_reason}, {usage}")
    after = chunks[finished[0] + 1:]
    if include_usage:
        expect(len(after) == 1 and after[0]["choices"] == [] and after[0].get("usage") == usage,
               f"include_usage: expected one usage chunk after the finish, got {after}")
    else:
        expect(after == [], f"chunks after the finish: {after}")
    parts = []
    for c in chunks[:finished[0] + 1]:
        expect(len(c["choices"]) == 1 and c["choices"][0].get("index") == 0, f"choices {c['choices']}")
        choice = c["choices"][0]
        if object_name == "chat.completion.chunk":
            expect(isinstance(choice.get("delta"), dict), f"chat chunk without a delta: {c}")
            parts.append(choice["delta"].get("content") or "")
        else:
            expect(isinstance(choice.get("text"), str), f"completion chunk without text: {c}")
            parts.append(choice["text"])
    if object_name == "chat.completion.chunk":
        expect(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "the first delta has no assistant role")
    return "".join(parts), finish_reason, usage


def stream_events(port, path, body, headers=None):
    """Runs a streaming request to its end; returns the EventStream (closed) and its events."""
    stream = EventStream(port, path, body, headers)
    try:
        if stream.status != 200:
            raise AssertionError(f"{path}: HTTP {stream.status}: {stream.response.read()[:300]!r}")
        expect(stream.content_type.startswith("text/event-stream"), f"Content-Type {stream.content_type!r}")
        return stream, stream.rest()
    finally:
        stream.close()


# ---------------------------------------------------------------------------------------------
# Metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def _parse_labels(text, line):
    labels, pos = {}, 0
    while pos < len(text.rstrip()):
        m = _LABEL.match(text, pos)
        expect(m is not None and m.end() > pos, f"bad labels in metrics line {line!r}")
        labels[m.group(1)] = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        pos = m.end()
    return labels


class Metrics:
    """The Prometheus text exposition: samples (name, labels, value) and the declared # TYPE of each family."""

    def __init__(self, text):
        self.samples = []
        self.types = {}
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) == 4 and parts[1] == "TYPE":
                    self.types[parts[2]] = parts[3].strip()
                continue
            m = _SAMPLE.match(line)
            expect(m is not None, f"not a metrics sample: {line!r}")
            name, labels, value = m.groups()
            try:
                number = float(value)
            except ValueError:
                raise AssertionError(f"not a number in metrics line {line!r}")
            self.samples.append((name, _parse_labels(labels or "", line), number))

    def names(self):
        return {name for name, _, _ in self.samples}

    def series(self, name):
        return [(labels, value) for n, labels, value in self.samples if n == name]

    def value(self, name, **labels):
        """The sum over the samples of name whose labels include these."""
        return sum(v for l, v in self.series(name) if all(l.get(k) == w for k, w in labels.items()))

    def completions_requests(self, status):
        # The endpoint label's spelling is the server's; the text completions one names "completions".
        return sum(v for l, v in self.series("deltainfer_requests_total")
                   if "completions" in l.get("endpoint", "") and "chat" not in l.get("endpoint", "")
                   and l.get("status") == str(status))

    def histogram_count(self, name):
        """Checks the family's buckets, sum and count against each other; returns the count."""
        expect(self.types.get(name) == "histogram", f"{name} is not declared a histogram: {self.types.get(name)}")
        buckets = sorted((float(l["le"]), v) for l, v in self.series(name + "_bucket") if "le" in l)
        expect(buckets and buckets[-1][0] == float("inf"), f"{name}: no le=\"+Inf\" bucket")
        counts = [v for _, v in buckets]
        expect(counts == sorted(counts), f"{name}: buckets are not cumulative: {buckets}")
        count = self.value(name + "_count")
        expect(count == buckets[-1][1], f"{name}: _count {count} differs from the +Inf bucket {buckets[-1][1]}")
        expect(self.value(name + "_sum") >= 0, f"{name}: negative _sum")
        return count


def metrics(port):
    reply = get(port, "/metrics")
    expect(reply.status == 200, f"/metrics: {reply}")
    return Metrics(reply.body.decode("utf-8"))


def idle_problems(m):
    problems = []
    for name in ("deltainfer_requests_running", "deltainfer_requests_waiting"):
        if m.value(name) != 0:
            problems.append(f"{name} = {m.value(name)}")
    for kind in ("state_slots", "kv_blocks"):
        free, total = m.value(f"deltainfer_{kind}_free"), m.value(f"deltainfer_{kind}_total")
        if total <= 0 or free != total:
            problems.append(f"deltainfer_{kind}_free = {free} of {total}")
    return problems


def wait_idle(port, timeout):
    """Waits until nothing runs or waits and every slot and block is free again."""
    deadline = time.monotonic() + timeout
    while True:
        problems = idle_problems(metrics(port))
        if not problems:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not idle {timeout} s later: {'; '.join(problems)}")
        time.sleep(0.2)


def eventually(check, timeout=5.0):
    """Retries check() until it passes: a counter may move a moment after its response arrived."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def openai_client(port, api_key="unused"):
    # No retries (a 429 must surface) and no proxy from the environment (loopback only).
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=api_key, max_retries=0,
                         timeout=HTTP_TIMEOUT_S, http_client=openai.DefaultHttpxClient(trust_env=False))


# ---------------------------------------------------------------------------------------------
# Tests

class ServerTestCase(unittest.TestCase):
    server = None

    def setUp(self):
        if not self.server.alive():
            self.fail(f"the server exited with status {self.server.proc.returncode}; stderr:\n"
                      f"{self.server.stderr_tail()}")

    @property
    def port(self):
        return self.server.port

    def assertError(self, reply, status, code=None):
        """An OpenAI-style error body with this status (and error code, when given)."""
        self.assertEqual(reply.status, status, reply)
        self.assertTrue(reply.headers.get("content-type", "").startswith("application/json"), reply.headers)
        try:
            error = reply.json()["error"]
        except (ValueError, KeyError, TypeError):
            self.fail(f"not an OpenAI error body: {reply}")
        self.assertIsInstance(error.get("message"), str, reply)
        self.assertTrue(error["message"].strip(), reply)
        self.assertIsInstance(error.get("type"), str, reply)
        self.assertIn("param", error, reply)
        self.assertTrue(error["param"] is None or isinstance(error["param"], str), reply)
        self.assertIn("code", error, reply)
        self.assertTrue(error["code"] is None or isinstance(error["code"], (str, int)), reply)
        if code is not None:
            self.assertEqual(error["code"], code, reply)
        return error

    def assertHealthy(self):
        self.assertTrue(self.server.alive(), f"the server exited; stderr:\n{self.server.stderr_tail()}")
        self.assertEqual(get(self.port, "/health").status, 200)

    def assertServing(self):
        self.assertHealthy()
        reply = complete(self.port, "Still there?", max_tokens=1)
        self.assertEqual(reply.status, 200, reply)


class ProtocolTests(ServerTestCase):
    """The good paths over plain HTTP: response shapes, streams, tokenizer endpoints, metrics."""

    @classmethod
    def setUpClass(cls):
        cls.server = main_server()

    def test_health(self):
        reply = get(self.port, "/health")
        self.assertEqual(reply.status, 200, reply)
        self.assertEqual(reply.json(), {"status": "ok"})

    def test_models(self):
        reply = get(self.port, "/v1/models")
        self.assertEqual(reply.status, 200, reply)
        body = reply.json()
        self.assertEqual(body["object"], "list")
        self.assertEqual(len(body["data"]), 1, body)
        model = body["data"][0]
        self.assertEqual((model["id"], model["object"], model["owned_by"], model["max_model_len"]),
                         (MODEL_NAME, "model", "deltainfer", MAX_MODEL_LEN))

    def test_completion_response_shape(self):
        before = time.time()
        reply = complete(self.port, "Hello, my name is", max_tokens=4, ignore_eos=True)
        self.assertEqual(reply.status, 200, reply)
        body = reply.json()
        self.assertTrue(body["id"].startswith("cmpl-"), body)
        self.assertEqual(body["object"], "text_completion")
        self.assertTrue(is_int(body["created"]) and abs(body["created"] - before) < 600, body)
        self.assertEqual(body["model"], MODEL_NAME)
        self.assertEqual(len(body["choices"]), 1)
        choice = body["choices"][0]
        self.assertEqual(choice["index"], 0)
        self.assertIsInstance(choice["text"], str)
        self.assertIn("logprobs", choice)
        self.assertIsNone(choice["logprobs"])
        self.assertEqual(choice["finish_reason"], "length")
        self.assertEqual(body["usage"]["completion_tokens"], 4)
        self.assertEqual(body["usage"]["total_tokens"], body["usage"]["prompt_tokens"] + 4)

    def test_default_max_tokens_is_16(self):
        reply = complete(self.port, "Count with me:", ignore_eos=True)
        self.assertEqual(reply.status, 200, reply)
        self.assertEqual(reply.json()["usage"]["completion_tokens"], 16)

    def test_prompt_forms_agree(self):
        prompt = "Token ids or text"
        ids = tokenize(self.port, prompt)["tokens"]
        texts = []
        for form in (prompt, ids, [prompt]):
            with self.subTest(prompt=form):
                reply = complete(self.port, form, max_tokens=6, ignore_eos=True)
                self.assertEqual(reply.status, 200, reply)
                self.assertEqual(reply.json()["usage"]["prompt_tokens"], len(ids))
                texts.append(reply.json()["choices"][0]["text"])
        self.assertEqual(texts[1:], texts[:1] * 2)

    def test_sampling_fields(self):
        prompt = "Sampling check"
        greedy = complete(self.port, prompt, max_tokens=8, ignore_eos=True).json()["choices"][0]["text"]
        # top_k 1 keeps only the most likely token: greedy whatever the temperature and seed.
        top1 = complete(self.port, prompt, max_tokens=8, ignore_eos=True, temperature=1.0, top_k=1, seed=3)
        self.assertEqual(top1.status, 200, top1)
        self.assertEqual(top1.json()["choices"][0]["text"], greedy)
        fields = dict(max_tokens=8, ignore_eos=True, temperature=0.9, top_p=0.9, top_k=50, min_p=0.05, seed=11)
        first, second = complete(self.port, prompt, **fields), complete(self.port, prompt, **fields)
        self.assertEqual(first.status, 200, first)
        self.assertEqual(first.json()["choices"][0]["text"], second.json()["choices"][0]["text"])
        for off in ({"top_k": -1}, {"top_k": 0}, {"logprobs": None}, {"n": 1}):
            with self.subTest(**off):
                reply = complete(self.port, prompt, max_tokens=2, **off)
                self.assertEqual(reply.status, 200, reply)

    def test_completion_stream_format(self):
        body = {"model": MODEL_NAME, "prompt": "Streaming test", "max_tokens": 5, "temperature": 0,
                "ignore_eos": True}
        expected = post_json(self.port, "/v1/completions", body).json()["choices"][0]["text"]
        for include_usage in (False, True):
            with self.subTest(include_usage=include_usage):
                _, events = stream_events(self.port, "/v1/completions",
                                          {**body, "stream": True, "stream_options": {"include_usage": include_usage}})
                text, _, usage = check_stream(events, "text_completion", max_tokens=5, include_usage=include_usage)
                self.assertEqual(text, expected)
                self.assertTrue(json.loads(events[0])["id"].startswith("cmpl-"))
                self.assertEqual(json.loads(events[0])["model"], MODEL_NAME)

    def test_chat_stream_format(self):
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 5,
                "temperature": 0, "ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}}
        reply = post_json(self.port, "/v1/chat/completions", body)
        self.assertEqual(reply.status, 200, reply)
        expected = reply.json()["choices"][0]["message"]["content"]
        for include_usage in (False, True):
            with self.subTest(include_usage=include_usage):
                _, events = stream_events(self.port, "/v1/chat/completions",
                                          {**body, "stream": True, "stream_options": {"include_usage": include_usage}})
                text, _, _ = check_stream(events, "chat.completion.chunk", max_tokens=5, include_usage=include_usage)
                self.assertEqual(text, expected)

    def test_chat_token_limits_and_thinking(self):
        messages = [{"role": "user", "content": "How many tokens?"}]

        def chat(**fields):
            reply = post_json(self.port, "/v1/chat/completions",
                              {"model": MODEL_NAME, "messages": messages, "temperature": 0, "ignore_eos": True,
                               **fields})
            self.assertEqual(reply.status, 200, reply)
            return reply.json()

        body = chat(max_completion_tokens=3)
        self.assertEqual(body["object"], "chat.completion")
        self.assertEqual(body["choices"][0]["message"]["role"], "assistant")
        self.assertEqual(body["usage"]["completion_tokens"], 3)
        counted = post_json(self.port, "/tokenize", {"messages": messages})
        self.assertEqual(counted.status, 200, counted)
        self.assertEqual(body["usage"]["prompt_tokens"], counted.json()["count"])
        # enable_thinking false closes an empty think block in the prompt: more prompt tokens.
        no_thinking = chat(max_tokens=1, chat_template_kwargs={"enable_thinking": False})
        self.assertGreater(no_thinking["usage"]["prompt_tokens"], body["usage"]["prompt_tokens"])

    def test_tokenize_detokenize(self):
        for text in ("Hello world", "héllo wörld 你好 🙂", " leading space\nand a newline"):
            with self.subTest(text=text):
                body = tokenize(self.port, text)
                self.assertTrue(body["tokens"] and all(is_int(t) for t in body["tokens"]), body)
                self.assertEqual(body["count"], len(body["tokens"]))
                self.assertEqual(body["max_model_len"], MAX_MODEL_LEN)
                back = post_json(self.port, "/detokenize", {"tokens": body["tokens"]})
                self.assertEqual(back.status, 200, back)
                self.assertEqual(back.json(), {"prompt": text})
        content = "Hello world"
        chat = post_json(self.port, "/tokenize", {"messages": [{"role": "user", "content": content}]})
        self.assertEqual(chat.status, 200, chat)
        self.assertGreater(chat.json()["count"], tokenize(self.port, content)["count"])
        for path, body in (("/tokenize", {}), ("/tokenize", {"prompt": 5}), ("/tokenize", {"messages": []}),
                           ("/detokenize", {}), ("/detokenize", {"tokens": "12"}), ("/detokenize", {"tokens": [-1]}),
                           ("/detokenize", {"tokens": [10**9]})):
            with self.subTest(path=path, body=body):
                self.assertError(post_json(self.port, path, body), 400)
        self.assertServing()

    def test_metrics(self):
        wait_idle(self.port, 30)
        prompt = "Counting tokens in the metrics"
        prompt_tokens = tokenize(self.port, prompt)["count"]
        before = metrics(self.port)
        self.assertEqual(complete(self.port, prompt, max_tokens=5, ignore_eos=True).status, 200)
        self.assertError(complete(self.port, prompt, max_tokens=0), 400)
        reply = get(self.port, "/metrics")
        self.assertTrue(reply.headers.get("content-type", "").startswith("text/plain"), reply.headers)

        def counted():
            after = metrics(self.port)
            missing = [name for name in REQUIRED_METRICS if name not in after.names()]
            self.assertEqual(missing, [])
            for labels, _ in after.series("deltainfer_requests_total"):
                self.assertTrue({"endpoint", "status"} <= set(labels), labels)
            self.assertEqual(after.completions_requests(200) - before.completions_requests(200), 1)
            self.assertEqual(after.completions_requests(400) - before.completions_requests(400), 1)
            self.assertEqual(after.value("deltainfer_prompt_tokens_total")
                             - before.value("deltainfer_prompt_tokens_total"), prompt_tokens)
            self.assertEqual(after.value("deltainfer_generation_tokens_total")
                             - before.value("deltainfer_generation_tokens_total"), 5)
            ttft = "deltainfer_time_to_first_token_seconds"
            self.assertGreaterEqual(after.histogram_count(ttft) - before.histogram_count(ttft), 1)
            tpot = "deltainfer_time_per_output_token_seconds"
            self.assertGreaterEqual(after.histogram_count(tpot), before.histogram_count(tpot))

        eventually(counted)
        wait_idle(self.port, 10)

    def test_disconnect_cancels_requests(self):
        wait_idle(self.port, 30)
        generated = metrics(self.port).value("deltainfer_generation_tokens_total")
        streams = []
        try:
            for i in range(8):
                stream = EventStream(self.port, "/v1/completions",
                                     {"model": MODEL_NAME, "prompt": f"Stream number {i}", "max_tokens": 480,
                                      "ignore_eos": True, "stream": True})
                streams.append(stream)
                self.assertEqual(stream.status, 200)
                self.assertIsNotNone(stream.next_event())
        finally:
            for i, stream in enumerate(streams):
                stream.close(reset=i % 2 == 1)
        wait_idle(self.port, 10)
        # Run to their end, the eight would have generated 3840 tokens.
        extra = metrics(self.port).value("deltainfer_generation_tokens_total") - generated
        self.assertLess(extra, 8 * 480 / 2)
        self.assertServing()


    def test_disconnect_cancels_whole_responses(self):
        # A non-streamed request sends nothing until it ends, except JSON whitespace every second:
        # that write is how the server notices the client left.
        wait_idle(self.port, 30)
        generated = metrics(self.port).value("deltainfer_generation_tokens_total")
        body = json.dumps({"model": MODEL_NAME, "prompt": "A long answer", "max_tokens": 480,
                           "ignore_eos": True}).encode()
        socks = []
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            socks.append(sock)
        time.sleep(2.5)
        for sock in socks:
            sock.close()
        wait_idle(self.port, 15)
        # Run to their end, the four would have generated 1920 tokens.
        extra = metrics(self.port).value("deltainfer_generation_tokens_total") - generated
        self.assertLess(extra, 4 * 480 / 2)
        self.assertServing()


class OpenAIClientTests(ServerTestCase):
    """The official openai client against the server."""

    @classmethod
    def setUpClass(cls):
        cls.server = main_server()
        cls.client = openai_client(cls.server.port)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def greedy(self, prompt, max_tokens, **fields):
        return self.client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                              extra_body={"ignore_eos": True}, **fields)

    def chat(self, messages, **fields):
        return self.client.chat.completions.create(
            model=MODEL_NAME, messages=messages, max_tokens=8, temperature=0,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}, "ignore_eos": True}, **fields)

    def test_models_list(self):
        self.assertEqual([m.id for m in self.client.models.list()], [MODEL_NAME])

    def test_completion(self):
        prompt = "The capital of France is"
        r = self.greedy(prompt, 8)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.id.startswith("cmpl-"), r.id)
        self.assertEqual(r.model, MODEL_NAME)
        self.assertEqual(len(r.choices), 1)
        self.assertEqual(r.choices[0].index, 0)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertIsInstance(r.choices[0].text, str)
        self.assertIsNone(r.choices[0].logprobs)
        self.assertEqual(r.usage.prompt_tokens, tokenize(self.port, prompt)["count"])
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 8)

    def test_completion_logprobs(self):
        r = self.greedy("Counting: one, two,", 5, logprobs=2)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 5)
        if not any("\ufffd" in t for t in lp.tokens):  # a character split over tokens decodes apart
            self.assertEqual("".join(lp.tokens), r.choices[0].text)
        self.assertEqual(len(lp.token_logprobs), 5)
        self.assertEqual(lp.text_offset[0], 0)
        for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(logprob, 0.0)
            self.assertLessEqual(len(top), 2)
            # Greedy draws the most likely token: the best alternative is the token itself.
            self.assertAlmostEqual(max(top.values()), logprob, places=5)
        # Streamed: one entry per token, the same values.
        chunks = list(self.greedy("Counting: one, two,", 5, logprobs=2, stream=True))
        streamed = [v for c in chunks if c.choices and c.choices[0].logprobs for v in c.choices[0].logprobs.token_logprobs]
        self.assertEqual(len(streamed), 5)
        for a, b in zip(streamed, lp.token_logprobs):
            self.assertAlmostEqual(a, b, places=5)

    def test_chat_logprobs(self):
        r = self.chat([{"role": "user", "content": "Say something."}], logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for entry in content:
            self.assertLessEqual(entry.logprob, 0.0)
            self.assertEqual(len(entry.top_logprobs), 3)
            self.assertAlmostEqual(entry.top_logprobs[0].logprob, entry.logprob, places=5)
            self.assertEqual(bytes(entry.bytes).decode("utf-8", "replace"), entry.token)
        self.assertIsNone(self.chat([{"role": "user", "content": "Say something."}]).choices[0].logprobs)

    def test_completion_stream_matches(self):
        prompt = "Once more, with streaming"
        expected = self.greedy(prompt, 8)
        chunks = list(self.greedy(prompt, 8, stream=True, stream_options={"include_usage": True}))
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), expected.choices[0].text)
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason],
                         ["length"])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 8)
        self.assertEqual(chunks[-1].usage.prompt_tokens, expected.usage.prompt_tokens)

    def test_chat(self):
        r = self.chat([{"role": "user", "content": "Write a short poem about the sea."}])
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, MODEL_NAME)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIsInstance(r.choices[0].message.content, str)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 8)

    def test_chat_stream_matches(self):
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Name three colours."}]
        expected = self.chat(messages)
        chunks = list(self.chat(messages, stream=True, stream_options={"include_usage": True}))
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, expected.choices[0].message.content)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 8)
        self.assertEqual(chunks[-1].usage.prompt_tokens, expected.usage.prompt_tokens)

    def test_echo(self):
        prompt = "Once upon a time"
        plain = self.greedy(prompt, 6)
        echoed = self.greedy(prompt, 6, echo=True)
        self.assertTrue(echoed.choices[0].text.startswith(prompt), echoed.choices[0].text)
        self.assertEqual(echoed.choices[0].text, prompt + plain.choices[0].text)
        self.assertEqual(echoed.usage.completion_tokens, 6)

    def test_stop_string(self):
        full = self.greedy("In the beginning", 32).choices[0].text
        stop = pick_stop(full)
        self.assertIsNotNone(stop, f"no usable stop string in the greedy output {full!r}")
        expected = full[:full.index(stop)]
        for stop_field in (stop, ["\u2603never", stop]):
            with self.subTest(stop=stop_field):
                r = self.greedy("In the beginning", 32, stop=stop_field)
                self.assertEqual(r.choices[0].text, expected)
                self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_seeded_sampling_is_reproducible(self):
        def sample():
            return self.client.completions.create(model=MODEL_NAME, prompt="Roll the dice:", max_tokens=12,
                                                  temperature=0.8, seed=7, extra_body={"ignore_eos": True})
        self.assertEqual(sample().choices[0].text, sample().choices[0].text)

    def test_errors_raise_client_exceptions(self):
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=0)
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="no-such-model", prompt="x", max_tokens=1)


def pick_stop(text):
    """Three characters from near the middle of text, neither whitespace only nor a replacement character."""
    mid = len(text) // 2
    for start in sorted(range(1, len(text) - 3), key=lambda s: abs(s - mid)):
        piece = text[start:start + 3]
        if "\ufffd" not in piece and piece.strip():
            return piece
    return None


class BadRequestTests(ServerTestCase):
    """Bad input gets an OpenAI-style error with the right status, and the server serves on."""

    @classmethod
    def setUpClass(cls):
        cls.server = main_server()

    def rejected(self, body, status=400, path="/v1/completions", code=None):
        """Posts body (an object, or raw bytes) and expects the error; then /health still answers."""
        if isinstance(body, bytes):
            reply = post_raw(self.port, path, body)
        else:
            reply = post_json(self.port, path, body)
        error = self.assertError(reply, status, code)
        self.assertHealthy()
        return error

    def completion_with(self, **fields):
        return {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2, **fields}

    def chat_with(self, **fields):
        return {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2, **fields}

    def test_malformed_json(self):
        for body in (b'{"model": "tiny", "prompt": ', b"", b"not json", b"[1, 2]", b'"a string"'):
            with self.subTest(body=body):
                self.rejected(body)
                self.rejected(body, path="/v1/chat/completions")
        self.assertServing()

    def test_prompt_of_wrong_type(self):
        for prompt in ({"text": "hi"}, 5, None, ["one", "two"], [1, "two"], [[1, 2]], [-1], [10**9]):
            with self.subTest(prompt=prompt):
                self.rejected(self.completion_with(prompt=prompt))
        body = self.completion_with()
        del body["prompt"]
        self.rejected(body)
        self.assertServing()

    def test_max_tokens_invalid(self):
        for value in (0, -1, 10**9, "8", 8.5, True):
            with self.subTest(max_tokens=value):
                self.rejected(self.completion_with(max_tokens=value))
                self.rejected(self.chat_with(max_tokens=value), path="/v1/chat/completions")
        self.rejected(self.chat_with(max_completion_tokens=0), path="/v1/chat/completions")
        self.assertServing()

    def test_sampling_fields_invalid(self):
        for fields in ({"temperature": "hot"}, {"temperature": -0.5}, {"temperature": 2.5}, {"top_p": 0},
                       {"top_p": 1.5}, {"top_p": "x"}, {"top_k": -2}, {"top_k": 1.5}, {"min_p": -0.1},
                       {"min_p": 1.5}, {"seed": "7"}, {"stop": 5}, {"stop": [1]}, {"ignore_eos": "yes"},
                       {"echo": 1}, {"stream": "yes"}, {"stream_options": {"include_usage": "yes"}},
                       {"n": 2}, {"n": 0}):
            with self.subTest(**fields):
                self.rejected(self.completion_with(**fields))
        self.rejected(self.chat_with(temperature="hot"), path="/v1/chat/completions")
        self.rejected(self.chat_with(n=2), path="/v1/chat/completions")
        self.assertServing()

    def test_logprobs_out_of_range(self):
        for value in (21, -1, "2"):
            error = self.rejected(self.completion_with(logprobs=value))
            self.assertIn("logprobs", error["message"].lower())
        self.assertServing()

    def test_unknown_model(self):
        self.rejected(self.completion_with(model="no-such-model"), 404, code="model_not_found")
        self.rejected(self.chat_with(model="no-such-model"), 404, path="/v1/chat/completions", code="model_not_found")
        self.assertServing()

    def test_chat_messages_invalid(self):
        for messages in ([], "hello", [{"role": "user", "content": 5}], [5]):
            with self.subTest(messages=messages):
                self.rejected(self.chat_with(messages=messages), path="/v1/chat/completions")
        body = self.chat_with()
        del body["messages"]
        self.rejected(body, path="/v1/chat/completions")
        self.rejected(self.chat_with(chat_template_kwargs={"enable_thinking": "no"}), path="/v1/chat/completions")
        self.assertServing()

    def test_prompt_too_long(self):
        long_prompt = " hello" * 600
        self.assertGreater(tokenize(self.port, long_prompt)["count"], MAX_MODEL_LEN)
        self.rejected(self.completion_with(prompt=long_prompt, max_tokens=1))
        self.rejected(self.chat_with(messages=[{"role": "user", "content": long_prompt}], max_tokens=1),
                      path="/v1/chat/completions")
        # The boundary: prompt tokens + max_tokens may reach max_model_len, not pass it.
        prompt = " hello" * 500
        count = tokenize(self.port, prompt)["count"]
        self.assertLess(count, MAX_MODEL_LEN - 1)
        self.rejected(self.completion_with(prompt=prompt, max_tokens=MAX_MODEL_LEN - count + 1))
        fits = complete(self.port, prompt, max_tokens=MAX_MODEL_LEN - count, ignore_eos=True)
        self.assertEqual(fits.status, 200, fits)
        self.assertEqual(fits.json()["usage"]["total_tokens"], MAX_MODEL_LEN)
        self.assertServing()

    def test_invalid_utf8(self):
        self.rejected(b'{"model": "tiny", "prompt": "\xff\xfe"}')
        self.rejected(b'{"model": "tiny", "messages": [{"role": "user", "content": "\xc3\x28"}]}',
                      path="/v1/chat/completions")
        self.assertServing()

    def test_body_too_large(self):
        body = b'{"model": "tiny", "prompt": "' + b"a" * (50 * 1000 * 1000) + b'"}'
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        reply = None
        try:
            conn.putrequest("POST", "/v1/completions")
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders()
            view = memoryview(body)
            try:
                for offset in range(0, len(body), 1 << 20):
                    conn.send(view[offset:offset + (1 << 20)])
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered early and closed: its answer may still be readable
            try:
                resp = conn.getresponse()
                reply = Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
            except (ConnectionError, http.client.RemoteDisconnected):
                pass  # a reset discards the answer; the server must still serve, checked below
        finally:
            conn.close()
        if reply is not None:
            self.assertError(reply, 413)
        self.assertServing()

    def test_unknown_path(self):
        self.assertError(get(self.port, "/v1/nothing-here"), 404)
        self.rejected(self.completion_with(), 404, path="/v2/completions")
        self.assertServing()

    def test_streaming_request_errors_are_json(self):
        # Validation comes before the stream starts: a plain JSON error, not an event stream.
        self.rejected(self.completion_with(stream=True, max_tokens=0))
        self.rejected(self.chat_with(stream=True, messages=[]), path="/v1/chat/completions")
        self.assertServing()


class ReasoningParserTests(ServerTestCase):
    """--reasoning-parser qwen3: a chat answer's thinking (before </think>) is reasoning_content."""

    @classmethod
    def setUpClass(cls):
        cls.server = start_server(extra=("--reasoning-parser", "qwen3"))
        cls.client = openai_client(cls.server.port)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        stop_server(cls.server)

    def ask(self, thinking, **fields):
        return self.client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Think, then answer."}], max_tokens=6,
            temperature=0, extra_body={"chat_template_kwargs": {"enable_thinking": thinking}, "ignore_eos": True},
            **fields)

    def test_thinking_goes_to_reasoning_content(self):
        # The tiny model never closes its thinking: everything it writes is reasoning.
        r = self.ask(True)
        message = r.choices[0].message.model_dump()
        self.assertIsInstance(message.get("reasoning_content"), str)
        self.assertNotEqual(message["reasoning_content"], "")
        self.assertEqual(message["content"], "")
        streamed = list(self.ask(True, stream=True))
        reasoning = "".join((c.choices[0].delta.model_dump().get("reasoning_content") or "")
                            for c in streamed if c.choices)
        self.assertEqual(reasoning, message["reasoning_content"])

    def test_without_thinking_everything_is_content(self):
        message = self.ask(False).choices[0].message.model_dump()
        self.assertEqual(message.get("reasoning_content"), "")
        self.assertNotEqual(message["content"], "")


class AuthTests(ServerTestCase):
    """A server with --api-key, and without --served-model-name: the model's directory names it."""

    KEY = "secret-key"

    @classmethod
    def setUpClass(cls):
        cls.server = start_server(api_key=cls.KEY, served_name=None)

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.server)

    def calls(self, headers):
        name = default_model_name()
        return [
            ("GET /v1/models", lambda: get(self.port, "/v1/models", headers)),
            ("POST /v1/completions", lambda: post_json(self.port, "/v1/completions",
                                                       {"model": name, "prompt": "Hi", "max_tokens": 1}, headers)),
            ("POST /v1/chat/completions", lambda: post_json(
                self.port, "/v1/chat/completions",
                {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}, headers)),
            ("POST /tokenize", lambda: post_json(self.port, "/tokenize", {"prompt": "Hi"}, headers)),
        ]

    def test_missing_key(self):
        for what, call in self.calls({}):
            with self.subTest(what):
                self.assertError(call(), 401)
        self.assertHealthy()

    def test_wrong_key(self):
        for headers in ({"Authorization": "Bearer wrong-key"}, {"Authorization": self.KEY},
                        {"Authorization": f"Bearer {self.KEY}x"}, {"Authorization": "Bearer "}):
            for what, call in self.calls(headers):
                with self.subTest(what, headers=headers):
                    self.assertError(call(), 401)
        self.assertHealthy()

    def test_right_key(self):
        for what, call in self.calls({"Authorization": f"Bearer {self.KEY}"}):
            with self.subTest(what):
                reply = call()
                self.assertEqual(reply.status, 200, reply)
        models = get(self.port, "/v1/models", {"Authorization": f"Bearer {self.KEY}"}).json()
        self.assertEqual([m["id"] for m in models["data"]], [default_model_name()])

    def test_openai_client_key(self):
        with openai_client(self.port, self.KEY) as client:
            r = client.completions.create(model=default_model_name(), prompt="Hi", max_tokens=2, temperature=0)
            self.assertEqual(r.model, default_model_name())
        with openai_client(self.port, "wrong-key") as client:
            with self.assertRaises(openai.AuthenticationError):
                client.models.list()

    def test_health_and_metrics_need_no_key(self):
        self.assertEqual(get(self.port, "/health").status, 200)
        self.assertEqual(get(self.port, "/metrics").status, 200)


class QueueFullTests(ServerTestCase):
    """One running and one waiting request fill a server with --max-num-seqs 1 --max-queued 1."""

    @classmethod
    def setUpClass(cls):
        cls.server = start_server(max_num_seqs=1, max_queued=1)

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.server)

    def test_full_queue_gives_429(self):
        long_request = {"model": MODEL_NAME, "prompt": "A long story", "max_tokens": 400, "ignore_eos": True,
                        "stream": True}
        running = EventStream(self.port, "/v1/completions", long_request)
        waiting = None
        try:
            self.assertEqual(running.status, 200)
            self.assertIsNotNone(running.next_event())
            # The second one waits for the first, headers and all: only send it.
            waiting = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT_S)
            waiting.request("POST", "/v1/completions", body=json.dumps(long_request).encode("utf-8"),
                            headers={"Content-Type": "application/json"})
            deadline = time.monotonic() + 30
            while True:
                m = metrics(self.port)
                if m.value("deltainfer_requests_running") == 1 and m.value("deltainfer_requests_waiting") == 1:
                    break
                self.assertLess(time.monotonic(), deadline,
                                f"never one running and one waiting: {idle_problems(m)}")
                time.sleep(0.05)
            # A few tries while the first two are in flight.
            statuses = []
            for _ in range(5):
                reply = complete(self.port, "One too many", max_tokens=1)
                statuses.append(reply.status)
                if reply.status == 429:
                    self.assertError(reply, 429)
                    break
                time.sleep(0.2)
            self.assertIn(429, statuses)
            streamed = post_json(self.port, "/v1/completions", {**long_request, "max_tokens": 1})
            self.assertError(streamed, 429)
        finally:
            running.close()
            if waiting is not None:
                waiting.close()
        wait_idle(self.port, 30)
        self.assertServing()


class SoakTests(ServerTestCase):
    """Many concurrent streaming clients on loopback, a quarter of them hanging up early."""

    CLIENTS = 200
    DEADLINE_S = 180
    WORDS = ("the quick brown fox jumps over a lazy dog near river stone light garden window music paper "
             "seven blue clouds drift slowly across morning sky").split()

    @classmethod
    def setUpClass(cls):
        cls.server = main_server()

    def run_client(self, index, prompt, max_tokens, failures, lock):
        hang_up = index % 4 == 0
        include_usage = index % 3 == 0
        body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": include_usage}}
        stream = None
        try:
            stream = EventStream(self.port, "/v1/completions", body, timeout=self.DEADLINE_S)
            if stream.status != 200:
                raise AssertionError(f"HTTP {stream.status}: {stream.response.read()[:300]!r}")
            expect(stream.content_type.startswith("text/event-stream"), f"Content-Type {stream.content_type!r}")
            if hang_up:
                expect(stream.next_event() is not None, "no event before the end of the stream")
                stream.close(reset=index % 8 == 4)
                return
            check_stream(stream.rest(), "text_completion", max_tokens=max_tokens, include_usage=include_usage)
        except Exception as e:  # whatever went wrong, reported with the client that met it
            with lock:
                failures.append(f"client {index} ({max_tokens} tokens, prompt {prompt!r}): {e!r}")
        finally:
            if stream is not None:
                stream.close()

    def test_concurrent_streams(self):
        rng = random.Random(1234)
        failures, lock = [], threading.Lock()
        threads = []
        for index in range(self.CLIENTS):
            prompt = " ".join(rng.choice(self.WORDS) for _ in range(rng.randint(1, 12)))
            thread = threading.Thread(target=self.run_client, args=(index, prompt, rng.randint(1, 8), failures, lock),
                                      daemon=True)
            threads.append(thread)
        start = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, start + self.DEADLINE_S - time.monotonic()))
        unfinished = sum(thread.is_alive() for thread in threads)
        self.assertEqual(unfinished, 0, f"{unfinished} clients still running after {self.DEADLINE_S} s")
        if failures:
            self.fail(f"{len(failures)} of {self.CLIENTS} clients failed, e.g.:\n" + "\n".join(failures[:10]))
        self.assertHealthy()
        wait_idle(self.port, 20)
        self.assertServing()


class ShutdownTests(unittest.TestCase):
    """SIGTERM: no new work, the request in flight ends, and the process exits 0."""

    def test_sigterm_drains_and_exits_zero(self):
        server = start_server(extra=("--shutdown-timeout", "5"))
        stream = None
        try:
            stream = EventStream(server.port, "/v1/completions",
                                 {"model": MODEL_NAME, "prompt": "Until the end", "max_tokens": 400,
                                  "ignore_eos": True, "stream": True}, timeout=30)
            self.assertEqual(stream.status, 200)
            self.assertIsNotNone(stream.next_event())
            server.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()

            self.assertTrue(wait_refused(server.port, 10), "the server still served /health 10 s after SIGTERM")
            try:
                late = post_json(server.port, "/v1/completions",
                                 {"model": MODEL_NAME, "prompt": "Too late", "max_tokens": 1}, timeout=10)
            except (ConnectionError, http.client.HTTPException):
                late = None  # refused or closed: no new work either
            if late is not None:
                self.assertEqual(late.status, 503, late)
                self.assertIn("error", late.json())

            try:
                events = stream.rest()
            except (ConnectionError, http.client.HTTPException):
                events = None  # closed by the server: ended all the same
            if events and "[DONE]" in events:
                self.assertEqual(events[-1], "[DONE]")
            try:
                status = server.proc.wait(timeout=max(0.0, signalled + 20 - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.fail(f"the server did not exit within 20 s of SIGTERM; stderr:\n{server.stderr_tail()}")
            self.assertEqual(status, 0, server.stderr_tail())
        finally:
            if stream is not None:
                stream.close()
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()
            _live_processes.discard(server.proc)
            server.log.close()


def wait_refused(port, timeout):
    """True once /health is refused (connection error) or answers 503."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if request(port, "GET", "/health", timeout=5).status == 503:
                return True
        except TimeoutError:
            continue  # accepted but unanswered: not refused
        except (ConnectionError, http.client.HTTPException):
            return True
        time.sleep(0.05)
    return False


def load_tests(loader, standard_tests, pattern):
    # A fixed order: the soak runs after the checks that compare exact metric deltas on the same server.
    suite = unittest.TestSuite()
    for case in (ProtocolTests, OpenAIClientTests, BadRequestTests, AuthTests, QueueFullTests, SoakTests,
                 ShutdownTests):
        suite.addTests(loader.loadTestsFromTestCase(case))
    return suite


def main():
    global BINARY, MODEL_DIR
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        sys.exit(2)
    BINARY, MODEL_DIR = sys.argv[1], sys.argv[2]
    # unittest.main exits 1 when a test (or a module fixture) failed.
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)


if __name__ == "__main__":
    main()

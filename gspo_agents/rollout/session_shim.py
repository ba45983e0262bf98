"""gspo_openai: the trainer's OpenAI-compatible endpoint from inside a sandbox session.

This file runs INSIDE the session (copied to /gspo-host/gspo_openai.py by
gspo_agents/rollout/session_endpoint.py), standard library only. Its socket is this episode's
alone: every call is recorded into the episode's trajectory, and no session header is needed.

    import sys; sys.path.insert(0, "/gspo-host")
    import gspo_openai
    reply = gspo_openai.chat(messages, max_tokens=16)     # the response JSON, as a dict
    messages.append(reply["choices"][0]["message"])      # send it back as it came: the turn extends

`local_base_url()` starts a forwarder on the session's own loopback and returns an HTTP base URL
for clients that need one (e.g. `openai.OpenAI(base_url=..., api_key="-")`).
"""

import http.client
import json
import socket
import threading

SOCKET = "/gspo-host/endpoint.sock"
MODEL = None  # the endpoint's model name, written in when the file is placed
TIMEOUT_S = 600.0


class EndpointError(RuntimeError):
    """The endpoint answered with an error (the message is its own)."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, timeout=TIMEOUT_S):
        super().__init__("localhost", timeout=timeout)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(SOCKET)


def request(method, path, body=None):
    """One call to the endpoint (`path` like "/v1/chat/completions"); the JSON answer."""
    conn = _UnixConnection()
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        answer = json.loads(resp.read() or b"{}")
    finally:
        conn.close()
    if resp.status != 200:
        message = answer.get("error", {}).get("message", answer)
        raise EndpointError(f"{resp.status}: {message}")
    return answer


def chat(messages, **params):
    """`/v1/chat/completions` with these messages (and max_tokens, tools, ...)."""
    return request("POST", "/v1/chat/completions", {"model": MODEL, "messages": messages, **params})


def complete(prompt, **params):
    """`/v1/completions`: a prompt string or a list of token ids (token in, token out)."""
    return request("POST", "/v1/completions", {"model": MODEL, "prompt": prompt, **params})


def local_base_url():
    """An `http://127.0.0.1:PORT/v1` on the session's loopback that forwards to the socket
    (a daemon thread; it lives as long as this process)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def pump(src, dst):
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def accept():
        while True:
            client, _ = listener.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(SOCKET)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
